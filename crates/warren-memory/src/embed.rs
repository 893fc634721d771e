//! Embedders for hybrid recall (MEM-2): the [`Embedder`] trait. `none` (the default) means no
//! embedder and keyword-only recall.

use crate::store::MemFuture;

/// Turns texts into vectors of one fixed dimension.
pub trait Embedder: Send + Sync {
    /// Where vectors come from, for messages (no secrets).
    fn describe(&self) -> String;
    /// What makes vectors comparable: model and dimensions. Stored vectors made under another
    /// identity are dropped (recall falls back to keywords for those rows).
    fn identity(&self) -> String {
        self.describe()
    }
    fn embed(&self, texts: Vec<String>) -> MemFuture<'_, Vec<Vec<f32>>>;
}
