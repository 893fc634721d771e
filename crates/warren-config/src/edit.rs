//! Dirty-path edits on the TOML document (CFG-2, CFG-5 [decision]): only the node at the edited
//! path changes, so comments, key order and formatting elsewhere stay byte-identical.

use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

use crate::error::ConfigError;
use crate::keypath::{KeyPath, Segment};

fn edit_err(path: &KeyPath, message: impl Into<String>) -> ConfigError {
    ConfigError::Edit {
        key: path.to_string(),
        message: message.into(),
    }
}

/// The item at `path`, if present (key segments only; array elements are not items).
pub(crate) fn get<'a>(doc: &'a DocumentMut, path: &KeyPath) -> Option<&'a Item> {
    let mut item = doc.as_item();
    for seg in path.segments() {
        item = match seg {
            Segment::Key(k) => item.as_table_like()?.get(k)?,
            Segment::Index(_) => return None,
        };
    }
    Some(item)
}

/// The string value at `path` (following array indexes), if it is a string.
pub(crate) fn get_str<'a>(doc: &'a DocumentMut, path: &KeyPath) -> Option<&'a str> {
    let (last, parent) = path.segments().split_last()?;
    let parent = get(doc, &KeyPath(parent.to_vec()))?;
    match last {
        Segment::Key(k) => parent.as_table_like()?.get(k)?.as_str(),
        Segment::Index(i) => parent.as_array()?.get(*i)?.as_str(),
    }
}

/// Sets `path` to `value`, creating missing parent tables. The old value's surrounding
/// whitespace and comments are kept.
pub(crate) fn set(doc: &mut DocumentMut, path: &KeyPath, value: Value) -> Result<(), ConfigError> {
    set_item(doc, path, Item::Value(value))
}

/// Sets `path` to a whole item (a `[table]` or a value).
///
/// New `[tables]` go to the end of the file (after any trailing comments, which stay with the
/// section above them), separated by a blank line.
pub(crate) fn set_item(
    doc: &mut DocumentMut,
    path: &KeyPath,
    new: Item,
) -> Result<(), ConfigError> {
    let Some((last, parents)) = path.segments().split_last() else {
        return Err(edit_err(path, "empty key path"));
    };
    let first_new = next_position(doc.as_item());
    let mut position = first_new;
    let mut new = new;
    if let Item::Table(t) = &mut new {
        let top = position + isize::try_from(parents.len()).unwrap_or(0);
        t.set_position(Some(top));
        // Sub-tables of a moved table (e.g. `[agents.<new>.workspace.access]`) follow it.
        let mut next = top + 1;
        renumber_children(t, &mut next);
    }
    let parent = walk_mut(doc.as_item_mut(), parents, path, &mut position)?;
    match last {
        Segment::Key(k) => {
            // Inline tables hold values only: convert a table item when needed.
            let inline = matches!(parent, Item::Value(Value::InlineTable(_)));
            let mut new = if inline { into_value_item(new) } else { new };
            let table = parent
                .as_table_like_mut()
                .ok_or_else(|| edit_err(path, "the parent of this key is a value, not a table"))?;
            if let (Some(old), Item::Value(v)) = (table.get(k).and_then(Item::as_value), &mut new) {
                *v.decor_mut() = old.decor().clone();
            }
            table.insert(k, new);
            Ok::<(), ConfigError>(())
        }
        Segment::Index(i) => {
            let array = parent
                .as_array_mut()
                .ok_or_else(|| edit_err(path, "not an array"))?;
            let Item::Value(mut v) = into_value_item(new) else {
                return Err(edit_err(path, "array elements must be values"));
            };
            let old = array
                .get(*i)
                .ok_or_else(|| edit_err(path, format!("index {i} is out of range")))?;
            *v.decor_mut() = old.decor().clone();
            array.replace(*i, v);
            Ok(())
        }
    }?;
    decorate_new_table(doc, path, first_new);
    Ok(())
}

/// Gives the tables under `t` consecutive positions from `next`, depth first, so a moved
/// table keeps its children right after it.
fn renumber_children(t: &mut toml_edit::Table, next: &mut isize) {
    for (_, item) in t.iter_mut() {
        if let Item::Table(child) = item {
            child.set_position(Some(*next));
            *next += 1;
            renumber_children(child, next);
        }
    }
}

/// One past the highest table position in the document.
fn next_position(item: &Item) -> isize {
    fn max_pos(item: &Item) -> isize {
        match item {
            Item::Table(t) => t
                .iter()
                .map(|(_, i)| max_pos(i))
                .fold(t.position().unwrap_or(0), isize::max),
            Item::ArrayOfTables(a) => a
                .iter()
                .map(|t| t.position().unwrap_or(0))
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }
    max_pos(item) + 1
}

/// Gives the deepest table created by an edit a blank line (or the document's trailing
/// comments) before its header.
fn decorate_new_table(doc: &mut DocumentMut, path: &KeyPath, first_new: isize) {
    let segs = path.segments();
    let trailing = doc.trailing().as_str().unwrap_or("").to_string();
    for len in (1..=segs.len()).rev() {
        let Some(Item::Table(t)) = walk_existing_mut(doc.as_item_mut(), &segs[..len]) else {
            continue;
        };
        let printed = !t.is_implicit() || t.iter().any(|(_, i)| i.is_value());
        if t.position().is_some_and(|p| p >= first_new) && printed {
            let prefix = if trailing.trim().is_empty() {
                "\n".to_string()
            } else {
                format!("{}\n\n", trailing.trim_end())
            };
            t.decor_mut().set_prefix(prefix);
            if !trailing.trim().is_empty() {
                doc.set_trailing("");
            }
            return;
        }
    }
}

/// Removes `path`; returns whether something was there.
pub(crate) fn remove(doc: &mut DocumentMut, path: &KeyPath) -> Result<bool, ConfigError> {
    let Some((last, parents)) = path.segments().split_last() else {
        return Err(edit_err(path, "empty key path"));
    };
    let Some(parent) = walk_existing_mut(doc.as_item_mut(), parents) else {
        return Ok(false);
    };
    Ok(match last {
        Segment::Key(k) => parent
            .as_table_like_mut()
            .and_then(|t| t.remove(k))
            .is_some(),
        Segment::Index(i) => match parent.as_array_mut() {
            Some(a) if *i < a.len() => {
                a.remove(*i);
                true
            }
            _ => false,
        },
    })
}

fn into_value_item(item: Item) -> Item {
    match item {
        Item::Table(t) => Item::Value(Value::InlineTable(t.into_inline_table())),
        other => other,
    }
}

/// Walks to `segs`, creating implicit tables (or inline tables inside inline tables).
fn walk_mut<'a>(
    mut item: &'a mut Item,
    segs: &[Segment],
    full: &KeyPath,
    position: &mut isize,
) -> Result<&'a mut Item, ConfigError> {
    for seg in segs {
        item = match seg {
            Segment::Key(k) => {
                let is_inline = matches!(item, Item::Value(Value::InlineTable(_)));
                let table = item.as_table_like_mut().ok_or_else(|| {
                    edit_err(
                        full,
                        format!("cannot create '{k}': its parent is a value, not a table"),
                    )
                })?;
                if table.get(k).is_none() {
                    let fresh = if is_inline {
                        Item::Value(Value::InlineTable(InlineTable::new()))
                    } else {
                        let mut t = Table::new();
                        t.set_implicit(true);
                        t.set_position(Some(*position));
                        *position += 1;
                        Item::Table(t)
                    };
                    table.insert(k, fresh);
                }
                table
                    .get_mut(k)
                    .ok_or_else(|| edit_err(full, "internal: inserted key vanished"))?
            }
            Segment::Index(_) => {
                return Err(edit_err(
                    full,
                    "editing inside arrays is not supported; set the whole array",
                ));
            }
        };
    }
    Ok(item)
}

fn walk_existing_mut<'a>(mut item: &'a mut Item, segs: &[Segment]) -> Option<&'a mut Item> {
    for seg in segs {
        item = match seg {
            Segment::Key(k) => item.as_table_like_mut()?.get_mut(k)?,
            Segment::Index(_) => return None,
        };
    }
    Some(item)
}
