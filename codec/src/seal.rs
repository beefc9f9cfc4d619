//! AES-256-GCM sealing of frames and of the index, with a key derived per object.
//!
//! The per-object key is HKDF-SHA256(master key, salt = object id). Object ids are 128 random
//! bits drawn for every object written, so each object has its own key and the frame number can
//! serve as the nonce without a nonce ever repeating under one key. The associated data binds a
//! frame to its position; the sealed index binds the frame count, so frames cannot be swapped,
//! dropped or reordered undetected.

use std::fmt;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::format::TAG_LEN;
use crate::framebuf::FrameBuf;

/// Length of a master key.
pub const KEY_LEN: usize = 32;

/// The 32-byte key a user supplies. Its bytes never appear in `Debug` output.
#[derive(Clone)]
pub struct MasterKey([u8; KEY_LEN]);

impl MasterKey {
    /// Takes the exact contents of a key file: 32 raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let key: [u8; KEY_LEN] = bytes.try_into().map_err(|_| {
            Error::InvalidKey(format!("a key file holds exactly 32 bytes, this one holds {}", bytes.len()))
        })?;
        Ok(MasterKey(key))
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

/// The key of one object, ready to seal and open its frames and index.
pub struct ObjectKey {
    cipher: Aes256Gcm,
    check: [u8; 8],
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ObjectKey(..)")
    }
}

/// Nonce of frame `frame`: its number, little-endian, zero-padded to 96 bits.
fn frame_nonce(frame: u64) -> Nonce<aes_gcm::aead::consts::U12> {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&frame.to_le_bytes());
    n.into()
}

/// Nonce of the index: all ones, a value no frame number reaches (frame counts are 32-bit).
fn index_nonce() -> Nonce<aes_gcm::aead::consts::U12> {
    [0xff; 12].into()
}

fn frame_aad(object_id: &[u8; 16], frame: u64, header12: &[u8; 12]) -> [u8; 40] {
    let mut a = [0u8; 40];
    a[..4].copy_from_slice(b"SKF1");
    a[4..20].copy_from_slice(object_id);
    a[20..28].copy_from_slice(&frame.to_le_bytes());
    a[28..40].copy_from_slice(header12);
    a
}

impl ObjectKey {
    /// Derives the key of the object with id `object_id`.
    pub fn derive(master: &MasterKey, object_id: &[u8; 16]) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(object_id), &master.0);
        let mut key = [0u8; 32];
        let mut check = [0u8; 8];
        hk.expand(b"shrinkfs v1 frame key", &mut key).expect("32 bytes is a valid HKDF length");
        hk.expand(b"shrinkfs v1 key check", &mut check).expect("8 bytes is a valid HKDF length");
        ObjectKey { cipher: Aes256Gcm::new(&key.into()), check }
    }

    /// The value stored in the header so a wrong key is recognised at once.
    pub fn key_check(&self) -> [u8; 8] {
        self.check
    }

    /// Encrypts `buf` in place and appends the tag (a lent buffer has room for it: frame
    /// buffers are asked for with it).
    pub fn seal_frame(&self, object_id: &[u8; 16], frame: u64, header12: &[u8; 12], buf: &mut FrameBuf) {
        let aad = frame_aad(object_id, frame, header12);
        let tag = self
            .cipher
            .encrypt_in_place_detached(&frame_nonce(frame), &aad, buf)
            .expect("a frame is far below AES-GCM's length limit");
        buf.extend_from_slice(&tag);
    }

    /// Checks the tag at the end of `buf` and decrypts the rest in place (tag removed).
    pub fn open_frame(&self, object_id: &[u8; 16], frame: u64, header12: &[u8; 12], buf: &mut Vec<u8>) -> Result<()> {
        if buf.len() < TAG_LEN {
            return Err(Error::Decrypt { frame });
        }
        let at = buf.len() - TAG_LEN;
        let tag = Tag::clone_from_slice(&buf[at..]);
        buf.truncate(at);
        let aad = frame_aad(object_id, frame, header12);
        self.cipher
            .decrypt_in_place_detached(&frame_nonce(frame), &aad, buf, &tag)
            .map_err(|_| Error::Decrypt { frame })
    }

    /// The tag that authenticates an index body.
    pub fn index_tag(&self, body: &[u8]) -> [u8; TAG_LEN] {
        let tag = self.cipher.encrypt_in_place_detached(&index_nonce(), body, &mut []).expect("empty plaintext");
        tag.into()
    }

    /// Checks an index body against its tag.
    pub fn verify_index(&self, body: &[u8], tag: &[u8]) -> Result<()> {
        if tag.len() != TAG_LEN {
            return Err(Error::IndexAuth);
        }
        let tag = Tag::clone_from_slice(tag);
        self.cipher.decrypt_in_place_detached(&index_nonce(), body, &mut [], &tag).map_err(|_| Error::IndexAuth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_opens_only_at_its_own_position() {
        let k = ObjectKey::derive(&MasterKey([1; 32]), &[2; 16]);
        let mut sealed = FrameBuf::from(b"hello frame".to_vec());
        k.seal_frame(&[2; 16], 5, &[0; 12], &mut sealed);
        let mut buf = sealed.into_vec();
        let mut moved = buf.clone();
        assert!(matches!(k.open_frame(&[2; 16], 6, &[0; 12], &mut moved), Err(Error::Decrypt { frame: 6 })));
        k.open_frame(&[2; 16], 5, &[0; 12], &mut buf).unwrap();
        assert_eq!(buf, b"hello frame");
    }

    #[test]
    fn keys_differ_per_object_and_per_master() {
        let m = MasterKey([1; 32]);
        let a = ObjectKey::derive(&m, &[2; 16]).key_check();
        let b = ObjectKey::derive(&m, &[3; 16]).key_check();
        let c = ObjectKey::derive(&MasterKey([9; 32]), &[2; 16]).key_check();
        assert_ne!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn key_files_must_hold_32_bytes() {
        assert!(MasterKey::from_bytes(&[0; 31]).is_err());
        assert!(MasterKey::from_bytes(&[0; 33]).is_err());
        assert!(MasterKey::from_bytes(&[0; 32]).is_ok());
    }
}
