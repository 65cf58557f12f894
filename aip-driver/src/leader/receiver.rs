//! The notification receiver: partners POST a bare task with the
//! `X-ACPS-AIP-Notification-Token` header; the engine checks the token and reads the task.

use agent_rt::body::{full, BodyError, ResponseBody};
use bytes::Bytes;

use super::LeaderHandle;

/// Largest notification body read (a task with its products).
const MAX_NOTIFICATION_BYTES: u64 = 16 * 1024 * 1024;

fn status_only(status: u16) -> http::Response<ResponseBody> {
    http::Response::builder()
        .status(status)
        .body(full(Bytes::new()))
        .expect("a status is a valid response")
}

impl LeaderHandle {
    /// The notification receiver as an [`agent_rt::Handler`]: every path takes POSTs.
    pub fn notification_handler(&self) -> agent_rt::Handler {
        let l = self.clone();
        agent_rt::Handler::new(move |req| {
            let l = l.clone();
            async move { l.handle_notification(req).await }
        })
    }

    /// Answers one notification POST: 200 taken, 401 unknown token, 400 unreadable, 405 not
    /// a POST, 413 too large.
    pub async fn handle_notification<B>(
        &self,
        req: http::Request<B>,
    ) -> http::Response<ResponseBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.method() != http::Method::POST {
            return status_only(405);
        }
        let token = aip_proto::http::notification_token(
            req.headers()
                .iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))),
        );
        let body = match agent_rt::body::read_body(req.into_body(), MAX_NOTIFICATION_BYTES).await {
            Ok(b) => b,
            Err(BodyError::TooLarge(_)) => return status_only(413),
            Err(_) => return status_only(400),
        };
        match self.notification(token, body.to_vec()).await {
            Some(status) => status_only(status),
            None => status_only(503),
        }
    }
}
