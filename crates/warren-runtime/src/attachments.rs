//! Files a turn's submitter attaches to the user's message (issue 38 §5: a photo sent to a
//! channel). Carried like the taint marker and the tool context: the submitter wraps
//! [`crate::host::AgentHost::submit`] in [`Attachments::scope`], the door carries the images into
//! the turn's task ([`Attachments::carry`]), and the turn takes them once for its first user
//! message ([`Attachments::take`]), so a subagent or a later round never repeats them. Outside
//! a scope there is nothing to take.

use std::future::Future;
use std::sync::{Arc, Mutex};

use warren_core::Image;

/// The images waiting for the turn's user message.
#[derive(Debug, Clone, Default)]
pub struct Attachments {
    images: Arc<Mutex<Vec<Image>>>,
}

tokio::task_local! {
    static ATTACHED: Attachments;
}

impl Attachments {
    /// Runs `future` (a submit at the door) with `images` attached to the turn it starts.
    pub async fn scope<F: Future>(images: Vec<Image>, future: F) -> F::Output {
        let attached = Attachments {
            images: Arc::new(Mutex::new(images)),
        };
        ATTACHED.scope(attached, future).await
    }

    /// `future` with the submitter's attachments (the door's spawned turn); none outside a
    /// scope.
    pub fn carry<F: Future>(future: F) -> impl Future<Output = F::Output> {
        let attached = ATTACHED.try_with(Clone::clone).unwrap_or_default();
        ATTACHED.scope(attached, future)
    }

    /// The attached images, once: a second take gets none.
    pub fn take() -> Vec<Image> {
        ATTACHED
            .try_with(|a| std::mem::take(&mut *a.images.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn attachments_reach_the_spawned_turn_once_issue38() {
        assert!(Attachments::take().is_empty(), "no scope: nothing");
        let image = Image {
            media_type: "image/png".into(),
            base64: "AA==".into(),
        };
        let seen = Attachments::scope(vec![image.clone()], async {
            tokio::spawn(Attachments::carry(async {
                (Attachments::take(), Attachments::take())
            }))
            .await
        })
        .await
        .ok();
        assert_eq!(seen, Some((vec![image], Vec::new())));
    }
}
