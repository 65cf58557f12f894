//! Server-sent events framing. (Being written.)
