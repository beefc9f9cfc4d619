//! The ordered encode pipeline of one object, shared by a mount's uploads, `pack` and
//! [`crate::writer::encode_all`]: raw frames handed in by number, from any thread, encoded where
//! the dispatcher sends them (the GPU or the CPU workers), and taken back encoded in frame order.

use std::sync::Arc;

use crate::codec::{Codec, CodecId};
use crate::dispatch::{Dispatcher, StreamGuard};
use crate::frame::{EncodedFrame, ObjectContext};
use crate::framebuf::FrameBuf;
use crate::ordered::Ordered;

/// One object's frames on their way through the dispatcher.
pub struct EncodeStream {
    ctx: Arc<ObjectContext>,
    codec: Arc<dyn Codec>,
    gpu_codec: CodecId,
    done: Ordered<EncodedFrame>,
    /// Held while this object streams (see [`Dispatcher::stream`]).
    stream: Option<StreamGuard>,
}

impl std::fmt::Debug for EncodeStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncodeStream({:?}, {:?})", self.gpu_codec, self.done)
    }
}

impl EncodeStream {
    /// Frames of the object `ctx` describes, encoded with `codec` on the CPU and `gpu_codec` on
    /// the GPU.
    pub fn new(ctx: Arc<ObjectContext>, codec: Arc<dyn Codec>, gpu_codec: CodecId) -> Self {
        EncodeStream { ctx, codec, gpu_codec, done: Ordered::new(), stream: None }
    }

    /// Hands frame `k` (each number once) to `dispatcher`; `hold` (memory budget room, a slot in
    /// a window) is let go as soon as the frame is encoded, before it is taken.
    pub fn submit(&self, dispatcher: &Dispatcher, k: u64, raw: impl Into<FrameBuf>, hold: impl Send + 'static) {
        let promise = self.done.promise(k);
        let (ctx, codec, stream) = (self.ctx.clone(), self.codec.clone(), self.stream.as_ref());
        dispatcher.submit_in(stream, ctx, codec, self.gpu_codec, k, raw.into(), move |f| {
            drop(hold);
            promise.fulfil(f);
        });
    }

    /// Marks this object as one of the streams `dispatcher` counts (a mount's file being written),
    /// until [`Self::end_stream`] or the end of this pipeline.
    pub fn start_stream(&mut self, dispatcher: &Dispatcher) {
        if self.stream.is_none() {
            self.stream = Some(dispatcher.stream());
        }
    }

    /// Whether this object is counted as a stream.
    pub fn streams(&self) -> bool {
        self.stream.is_some()
    }

    /// No more frames will come from this object: it no longer counts as a stream.
    pub fn end_stream(&mut self) {
        self.stream = None;
    }

    /// The encoded frames, taken in frame order; a frame whose encoder stopped without it is
    /// taken as [`crate::ordered::Lost`] in its turn.
    pub fn frames(&self) -> &Ordered<EncodedFrame> {
        &self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::cpu_equivalent;
    use crate::{EncodeConfig, decode_payload};

    #[test]
    fn frames_submitted_from_several_threads_come_back_in_frame_order_and_decode() {
        let config = EncodeConfig::default();
        let ctx = Arc::new(config.new_object());
        let stream = EncodeStream::new(ctx.clone(), cpu_equivalent(CodecId::Zstd, 1), CodecId::Zstd);
        let dispatcher = Dispatcher::cpu_only("test");
        // Frames larger than the dispatcher encodes inline, of different sizes, so they finish
        // on the workers out of order.
        let frame = |k: u64| vec![k as u8; (200 << 10) + ((k as usize * 7919) % 64) * 1024];
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (stream, dispatcher) = (&stream, &dispatcher);
                s.spawn(move || {
                    for k in (t..30).step_by(3).collect::<Vec<_>>().into_iter().rev() {
                        stream.submit(dispatcher, k, frame(k), ());
                    }
                });
            }
            for k in 0..30u64 {
                let f = stream.frames().wait_next().expect("not closed").expect("encoded");
                let mut out = Vec::new();
                decode_payload(&ctx, k, &f.header, &f.payload, None, &mut out).unwrap();
                assert_eq!(out, frame(k), "frame {k}");
            }
        });
        stream.frames().close();
        assert!(stream.frames().wait_next().is_none(), "closed, and every frame taken");
    }
}
