//! The metadata of one nVCOMP batch, laid out in one place: the per-chunk arrays that nVCOMP's
//! batched calls read (addresses and sizes of inputs and outputs) and write (output sizes and
//! statuses), end to end in one buffer that is filled on the host, copied to the device whole,
//! and read back in part.

use std::ops::Range;

/// An array of one 8-byte little-endian word per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    /// Device address of each input.
    InPtrs,
    /// Bytes of each input.
    InSizes,
    /// Room for each output (decompression only).
    OutCaps,
    /// Bytes of each output, written by nVCOMP.
    OutSizes,
    /// Device address of each output.
    OutPtrs,
}

/// Which batched call a batch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Call {
    /// `nvcompBatched*CompressAsync`.
    Compress,
    /// `nvcompBatched*DecompressAsync`.
    Decompress,
}

impl Call {
    /// The word arrays this call takes, in their order in the buffer.
    fn fields(self) -> &'static [Field] {
        use Field::*;
        match self {
            Call::Compress => &[InPtrs, InSizes, OutPtrs, OutSizes],
            Call::Decompress => &[InPtrs, InSizes, OutCaps, OutSizes, OutPtrs],
        }
    }
}

/// Where each array of the metadata of a batch of `chunks` lies: the word arrays of its call,
/// then one 4-byte status per chunk.
#[derive(Clone, Copy, Debug)]
pub(super) struct BatchMeta {
    call: Call,
    chunks: usize,
}

impl BatchMeta {
    /// The layout for `chunks` chunks of `call`.
    pub(super) fn new(call: Call, chunks: usize) -> Self {
        BatchMeta { call, chunks }
    }

    /// The call it is for.
    pub(super) fn call(&self) -> Call {
        self.call
    }

    /// Chunks in the batch.
    pub(super) fn chunks(&self) -> usize {
        self.chunks
    }

    /// Bytes of the whole buffer (never 0: an empty batch still has a buffer to point at).
    pub(super) fn len(&self) -> usize {
        let n = self.chunks.max(1);
        8 * self.call.fields().len() * n + 4 * n
    }

    /// Byte range of `field`'s array.
    ///
    /// # Panics
    /// If the call takes no such array (a compression has no `OutCaps`): a bug in the caller.
    pub(super) fn range(&self, field: Field) -> Range<usize> {
        let k = self.call.fields().iter().position(|&f| f == field).expect("the call takes this array");
        let at = 8 * self.chunks * k;
        at..at + 8 * self.chunks
    }

    /// Byte range of the statuses.
    pub(super) fn statuses(&self) -> Range<usize> {
        let at = 8 * self.chunks * self.call.fields().len();
        at..at + 4 * self.chunks
    }

    /// Zeroes the buffer (outputs and statuses start at zero) and writes `field`'s words from
    /// `values`, for each of `fields`.
    pub(super) fn fill<const K: usize>(&self, host: &mut [u8], fields: [(Field, &dyn Fn(usize) -> u64); K]) {
        host[..self.len()].fill(0);
        for (field, value) in fields {
            let r = self.range(field);
            for (i, word) in host[r].chunks_exact_mut(8).enumerate() {
                word.copy_from_slice(&value(i).to_le_bytes());
            }
        }
    }

    /// Word `i` of `field`'s array.
    pub(super) fn word(&self, host: &[u8], field: Field, i: usize) -> u64 {
        let at = self.range(field).start + 8 * i;
        u64::from_le_bytes(host[at..at + 8].try_into().expect("8 bytes"))
    }

    /// Status of chunk `i` (`nvcompStatus_t`).
    pub(super) fn status(&self, host: &[u8], i: usize) -> i32 {
        let at = self.statuses().start + 4 * i;
        i32::from_le_bytes(host[at..at + 4].try_into().expect("4 bytes"))
    }

    /// Device address of `field`'s array in a copy of the buffer at `base`.
    pub(super) fn device(&self, base: u64, field: Field) -> u64 {
        base + self.range(field).start as u64
    }

    /// Device address of the statuses in a copy of the buffer at `base`.
    pub(super) fn device_statuses(&self, base: u64) -> u64 {
        base + self.statuses().start as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_lays_out_its_arrays_end_to_end_then_the_statuses() {
        let c = BatchMeta::new(Call::Compress, 3);
        assert_eq!(c.range(Field::InPtrs), 0..24);
        assert_eq!(c.range(Field::InSizes), 24..48);
        assert_eq!(c.range(Field::OutPtrs), 48..72);
        assert_eq!(c.range(Field::OutSizes), 72..96);
        assert_eq!((c.statuses(), c.len()), (96..108, 108));
        let d = BatchMeta::new(Call::Decompress, 2);
        assert_eq!(d.range(Field::OutCaps), 32..48);
        assert_eq!(d.range(Field::OutSizes), 48..64);
        assert_eq!(d.range(Field::OutPtrs), 64..80);
        assert_eq!((d.statuses(), d.len()), (80..88, 88));
        assert_eq!(d.device(0x1000, Field::OutPtrs), 0x1000 + 64);
        assert_eq!(d.device_statuses(0x1000), 0x1000 + 80);
        assert_eq!(BatchMeta::new(Call::Decompress, 0).len(), 44, "an empty batch keeps a buffer");
    }

    #[test]
    fn fill_writes_the_given_arrays_and_zeroes_the_rest() {
        let m = BatchMeta::new(Call::Compress, 2);
        let mut host = vec![0xaa; m.len() + 5];
        m.fill(&mut host, [(Field::InPtrs, &|i| 0x100 + i as u64), (Field::InSizes, &|i| 10 * i as u64 + 1)]);
        assert_eq!((m.word(&host, Field::InPtrs, 1), m.word(&host, Field::InSizes, 1)), (0x101, 11));
        assert_eq!((m.word(&host, Field::OutSizes, 0), m.status(&host, 1)), (0, 0));
        assert!(host[m.len()..].iter().all(|&b| b == 0xaa), "nothing past the layout is touched");
        host[m.statuses().start + 4..m.statuses().start + 8].copy_from_slice(&(-3i32).to_le_bytes());
        assert_eq!(m.status(&host, 1), -3);
    }

    #[test]
    #[should_panic(expected = "the call takes this array")]
    fn an_array_the_call_does_not_take_is_a_bug() {
        BatchMeta::new(Call::Compress, 1).range(Field::OutCaps);
    }
}
