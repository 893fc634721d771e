//! Embedders for hybrid recall (MEM-2): the [`Embedder`] trait. `none` (the default) means no
//! embedder and keyword-only recall.

use crate::store::MemFuture;

/// Turns texts into vectors of one fixed dimension.
pub trait Embedder: Send + Sync {
    /// Where vectors come from, for messages (no secrets).
    fn describe(&self) -> String;
    fn embed(&self, texts: Vec<String>) -> MemFuture<'_, Vec<Vec<f32>>>;
}
