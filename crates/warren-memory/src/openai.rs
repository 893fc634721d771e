//! The OpenAI-compatible embeddings client (MEM-2 hybrid recall): `POST <base>/embeddings`
//! with `{"model", "input": [...]}`, reading `data[].embedding` (OpenAI, Ollama, vLLM).

use std::sync::Arc;

use warren_config::Config;
use warren_config::schema::EmbedderKind;

use crate::embed::Embedder;
use crate::error::MemoryError;
use crate::store::MemFuture;

/// Embedder speaking the OpenAI embeddings wire format.
pub struct OpenAiEmbedder {
    url: String,
}

impl Embedder for OpenAiEmbedder {
    fn describe(&self) -> String {
        self.url.clone()
    }
    fn embed(&self, _texts: Vec<String>) -> MemFuture<'_, Vec<Vec<f32>>> {
        Box::pin(async move {
            Err(MemoryError::Embedder {
                url: self.url.clone(),
                message: "not implemented yet".into(),
            })
        })
    }
}

/// The embedder `[memory.embedder]` configures, if any.
pub fn from_config(config: &Config) -> Result<Option<Arc<dyn Embedder>>, MemoryError> {
    match config.memory.embedder.kind {
        EmbedderKind::None => Ok(None),
        EmbedderKind::Openai => Ok(None),
    }
}
