//! The images partitions boot from, held by the hypervisor: the boot
//! bundle's (inside the payload, read-only, listed first) and those the
//! management partition uploads at run time (IMAGE_CREATE, _WRITE, _SEAL),
//! each in a block of host RAM the hypervisor took from the free pool. A
//! partition's start copies its kernel and initrd from here into its RAM,
//! so a guest can scribble over its own copy and the next boot is clean.
//!
//! Rules: an image is written front to back (each write continues where the
//! last ended, so "all of it written" is one comparison); only a sealed image
//! (complete, its SHA-256 computed and compared with the uploader's) can be
//! named by a plan; sealed images never change; an image a partition names
//! cannot be deleted; a deleted or refused image's RAM is zeroed before it
//! goes back to the pool. Ids are never reused while the hypervisor runs,
//! so a stale id cannot name a newer image.

use crate::addr::PhysAddr;
use crate::memmap::FreeMemory;
use crate::partition::HostMemory;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use pinfold_abi::{AbiError, ImageInfo, ImageKind, Rejection};
use pinfold_config::Plan;
use pinfold_vboard::RAM_ALIGN;
use sha2::{Digest, Sha256};

/// The largest image the hypervisor accepts (a Debian kernel is ~30 MiB,
/// an initrd with modules tens of MiB).
pub const MAX_IMAGE: u64 = 512 << 20;

/// Bytes hashed or scrubbed per step.
const CHUNK: usize = 64 * 1024;

/// Where an image's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bytes {
    /// `size` bytes at `offset` of the payload.
    Payload { offset: u64 },
    /// A block of host RAM of `reserved` bytes (a multiple of RAM_ALIGN).
    Ram { pa: u64, reserved: u64 },
}

#[derive(Debug, Clone)]
pub struct Image {
    pub kind: ImageKind,
    pub bytes: Bytes,
    pub size: u64,
    pub written: u64,
    pub sha256: Option<[u8; 32]>,
}

impl Image {
    pub fn sealed(&self) -> bool {
        self.sha256.is_some()
    }
}

/// A sealed image's bytes, for a partition's load.
#[derive(Debug, Clone, Copy)]
pub enum View {
    Slice(&'static [u8]),
    Ram { pa: u64, len: u64 },
}

impl View {
    pub fn len(&self) -> u64 {
        match *self {
            View::Slice(s) => s.len() as u64,
            View::Ram { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its first `out.len()` bytes (fewer if it is shorter): the header
    /// the placement reads.
    pub fn head(&self, mem: &impl HostMemory, out: &mut [u8]) -> usize {
        let n = (self.len() as usize).min(out.len());
        match *self {
            View::Slice(s) => out[..n].copy_from_slice(&s[..n]),
            View::Ram { pa, .. } => mem.read(PhysAddr(pa), &mut out[..n]),
        }
        n
    }

    /// Copy the whole image to host address `dst`.
    pub fn copy_to(&self, mem: &mut impl HostMemory, dst: PhysAddr) {
        match *self {
            View::Slice(s) => mem.write(dst, s),
            View::Ram { pa, len } => mem.copy(dst, PhysAddr(pa), len),
        }
    }
}

/// The images, by id.
pub struct ImageStore {
    images: Vec<Option<Image>>,
    payload: &'static [u8],
    /// How many of the first ids are the boot bundle's.
    boot: usize,
}

fn rejection(field: &str, message: String) -> Rejection {
    Rejection {
        field: String::from(field),
        message,
        conflict: false,
    }
}

impl ImageStore {
    /// The boot bundle's images: ids 0.. in plan order, kind from the
    /// first partition naming them (an image no partition names is listed
    /// as a kernel).
    pub fn new(plan: &Plan, payload: &'static [u8]) -> Self {
        let images = plan
            .images
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let i = i as u32;
                let initrd_only = plan.partitions.iter().any(|p| p.initrd == Some(i))
                    && !plan.partitions.iter().any(|p| p.kernel.image == i);
                Some(Image {
                    kind: if initrd_only {
                        ImageKind::Initrd
                    } else {
                        ImageKind::Kernel
                    },
                    bytes: Bytes::Payload { offset: r.offset },
                    size: r.size,
                    written: r.size,
                    sha256: Some(r.sha256),
                })
            })
            .collect::<Vec<_>>();
        let boot = images.len();
        ImageStore {
            images,
            payload,
            boot,
        }
    }

    pub fn get(&self, id: u32) -> Option<&Image> {
        self.images.get(id as usize)?.as_ref()
    }

    pub fn is_boot(&self, id: u32) -> bool {
        (id as usize) < self.boot
    }

    /// A sealed image's bytes.
    pub fn view(&self, id: u32) -> Option<View> {
        let image = self.get(id).filter(|i| i.sealed())?;
        Some(match image.bytes {
            Bytes::Payload { offset } => View::Slice(
                self.payload
                    .get(offset as usize..(offset + image.size) as usize)?,
            ),
            Bytes::Ram { pa, .. } => View::Ram {
                pa,
                len: image.size,
            },
        })
    }

    /// Bytes of host RAM run-time images hold.
    pub fn ram_bytes(&self) -> u64 {
        self.ram_blocks().map(|(_, size)| size).sum()
    }

    /// The RAM blocks run-time images hold, `(base, size)`.
    pub fn ram_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.images.iter().flatten().filter_map(|i| match i.bytes {
            Bytes::Ram { pa, reserved } => Some((pa, reserved)),
            Bytes::Payload { .. } => None,
        })
    }

    /// A new empty image of `size` bytes, in RAM from `free`.
    pub fn create(
        &mut self,
        kind: ImageKind,
        size: u64,
        free: &mut FreeMemory,
    ) -> Result<u32, AbiError> {
        if size == 0 || size > MAX_IMAGE {
            return Err(AbiError::InvalidParameters);
        }
        let id = u32::try_from(self.images.len()).map_err(|_| AbiError::NoResources)?;
        let reserved = size.next_multiple_of(RAM_ALIGN);
        let pa = free
            .take_top(reserved, RAM_ALIGN)
            .ok_or(AbiError::NoResources)?;
        self.images.push(Some(Image {
            kind,
            bytes: Bytes::Ram { pa, reserved },
            size,
            written: 0,
            sha256: None,
        }));
        Ok(id)
    }

    /// Append `bytes` at `offset` of unsealed image `id` (which must be
    /// where the last write ended).
    pub fn write(
        &mut self,
        id: u32,
        offset: u64,
        bytes: &[u8],
        mem: &mut impl HostMemory,
    ) -> Result<usize, AbiError> {
        let image = self
            .images
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(AbiError::NotFound)?;
        let Bytes::Ram { pa, .. } = image.bytes else {
            return Err(AbiError::Denied);
        };
        if image.sealed() {
            return Err(AbiError::Conflict);
        }
        let end = offset.checked_add(bytes.len() as u64);
        if offset != image.written || end.is_none_or(|end| end > image.size) {
            return Err(AbiError::InvalidParameters);
        }
        mem.write(PhysAddr(pa + offset), bytes);
        image.written += bytes.len() as u64;
        Ok(bytes.len())
    }

    /// Copy bytes of sealed image `id` from `offset` on into `out` (IMAGE_READ,
    /// for the manager's configuration store): as many as fit, fewer at the
    /// image's end, none from `offset` = its size on. NOT_FOUND for no such
    /// image, CONFLICT for one still being written, INVALID_PARAMETERS for
    /// an offset past its end.
    pub fn read(
        &self,
        id: u32,
        offset: u64,
        out: &mut [u8],
        mem: &impl HostMemory,
    ) -> Result<usize, AbiError> {
        let image = self.get(id).ok_or(AbiError::NotFound)?;
        if !image.sealed() {
            return Err(AbiError::Conflict);
        }
        if offset > image.size {
            return Err(AbiError::InvalidParameters);
        }
        let n = (image.size - offset).min(out.len() as u64) as usize;
        match image.bytes {
            Bytes::Payload { offset: at } => {
                let start = at + offset;
                let src = self
                    .payload
                    .get(start as usize..start as usize + n)
                    .ok_or(AbiError::InvalidParameters)?;
                out[..n].copy_from_slice(src);
            }
            Bytes::Ram { pa, .. } => mem.read(PhysAddr(pa + offset), &mut out[..n]),
        }
        Ok(n)
    }

    /// Seal image `id`: complete, and its SHA-256 `expected` if given. A
    /// refused image is discarded (scrubbed, its RAM back in `free`).
    pub fn seal(
        &mut self,
        id: u32,
        expected: Option<[u8; 32]>,
        mem: &mut impl HostMemory,
        free: &mut FreeMemory,
    ) -> Result<(), crate::hypercall::Refusal> {
        let image = self.get(id).ok_or(AbiError::NotFound)?.clone();
        let Bytes::Ram { pa, .. } = image.bytes else {
            return Err(AbiError::Denied.into());
        };
        if image.sealed() {
            return Err(AbiError::Conflict.into());
        }
        let refused = if image.written != image.size {
            Some(rejection(
                "size",
                format!(
                    "image {id}: {} of its {} bytes were written",
                    image.written, image.size
                ),
            ))
        } else {
            let digest = hash(mem, pa, image.size);
            match expected {
                Some(want) if want != digest => Some(rejection(
                    "sha256",
                    format!(
                        "image {id}: its SHA-256 is {}, not {}",
                        pinfold_config::bundle::Hex(&digest),
                        pinfold_config::bundle::Hex(&want)
                    ),
                )),
                _ => {
                    if let Some(Some(i)) = self.images.get_mut(id as usize) {
                        i.sha256 = Some(digest);
                    }
                    None
                }
            }
        };
        match refused {
            None => Ok(()),
            Some(r) => {
                self.discard(id, mem, free);
                Err(crate::hypercall::Refusal::Rejected(r))
            }
        }
    }

    /// Delete image `id` (the caller checked nobody names it): boot
    /// images are DENIED.
    pub fn delete(
        &mut self,
        id: u32,
        mem: &mut impl HostMemory,
        free: &mut FreeMemory,
    ) -> Result<(), AbiError> {
        self.get(id).ok_or(AbiError::NotFound)?;
        if self.is_boot(id) {
            return Err(AbiError::Denied);
        }
        self.discard(id, mem, free);
        Ok(())
    }

    fn discard(&mut self, id: u32, mem: &mut impl HostMemory, free: &mut FreeMemory) {
        let Some(slot) = self.images.get_mut(id as usize) else {
            return;
        };
        if let Some(Image {
            bytes: Bytes::Ram { pa, reserved },
            ..
        }) = slot.take()
        {
            mem.zero(PhysAddr(pa), reserved);
            free.give_back(pa, reserved);
        }
    }

    /// LIST_IMAGES' entries; `used_by(id)` names the partitions whose plan
    /// names image `id`.
    pub fn info(&self, mut used_by: impl FnMut(u32) -> Vec<u32>) -> Vec<ImageInfo> {
        self.images
            .iter()
            .enumerate()
            .filter_map(|(id, i)| {
                let i = i.as_ref()?;
                let id = id as u32;
                Some(ImageInfo {
                    id,
                    kind: i.kind,
                    size: i.size,
                    written: i.written,
                    sealed: i.sealed(),
                    sha256: i.sha256,
                    used_by: used_by(id),
                    boot: self.is_boot(id),
                })
            })
            .collect()
    }
}

/// SHA-256 of `len` bytes of host RAM at `pa`.
fn hash(mem: &impl HostMemory, pa: u64, len: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut buf = alloc::vec![0u8; CHUNK];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(CHUNK as u64) as usize;
        mem.read(PhysAddr(pa + at), &mut buf[..n]);
        h.update(&buf[..n]);
        at += n as u64;
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypercall::Refusal;

    /// Host RAM as a byte vector from `BASE`.
    struct Ram(Vec<u8>);
    const BASE: u64 = 0x4000_0000;
    const MIB: u64 = 1 << 20;

    impl HostMemory for Ram {
        fn write(&mut self, pa: PhysAddr, bytes: &[u8]) {
            let at = (pa.0 - BASE) as usize;
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
        }
        fn read(&self, pa: PhysAddr, out: &mut [u8]) {
            let at = (pa.0 - BASE) as usize;
            out.copy_from_slice(&self.0[at..at + out.len()]);
        }
        fn clean_for_guest(&mut self, _: PhysAddr, _: u64) {}
        fn sync_instructions(&mut self) {}
    }

    fn setup() -> (ImageStore, Ram, FreeMemory) {
        let plan = Plan {
            partitions: Vec::new(),
            images: alloc::vec![pinfold_config::ImageRef {
                offset: 0,
                size: 4,
                sha256: pinfold_config::bundle::sha256(b"boot"),
            }],
        };
        (
            ImageStore::new(&plan, b"boot"),
            Ram(alloc::vec![0x5a; 16 * MIB as usize]),
            FreeMemory::new(&[(BASE, 16 * MIB)], &[]),
        )
    }

    #[test]
    fn an_image_written_whole_with_its_digest_seals_and_can_be_viewed() {
        let (mut store, mut ram, mut free) = setup();
        let id = store.create(ImageKind::Kernel, 5, &mut free).unwrap();
        assert_eq!(id, 1);
        store.write(id, 0, b"hel", &mut ram).unwrap();
        store.write(id, 3, b"lo", &mut ram).unwrap();

        store
            .seal(
                id,
                Some(pinfold_config::bundle::sha256(b"hello")),
                &mut ram,
                &mut free,
            )
            .unwrap();

        let view = store.view(id).unwrap();
        let mut head = [0u8; 8];
        assert_eq!(view.head(&ram, &mut head), 5);
        assert_eq!(&head[..5], b"hello");
        assert_eq!(store.ram_bytes(), 2 * MIB);
        assert_eq!(free.total(), 14 * MIB);
    }

    #[test]
    fn writes_must_continue_where_the_last_ended_and_stay_inside() {
        let (mut store, mut ram, mut free) = setup();
        let id = store.create(ImageKind::Initrd, 4, &mut free).unwrap();

        assert_eq!(
            store.write(id, 1, b"x", &mut ram),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(
            store.write(id, 0, b"12345", &mut ram),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(store.write(0, 0, b"x", &mut ram), Err(AbiError::Denied));
        assert_eq!(store.write(9, 0, b"x", &mut ram), Err(AbiError::NotFound));
    }

    #[test]
    fn a_wrong_digest_discards_the_image_and_scrubs_its_ram() {
        let (mut store, mut ram, mut free) = setup();
        let id = store.create(ImageKind::Kernel, 4, &mut free).unwrap();
        store.write(id, 0, b"evil", &mut ram).unwrap();

        let r = store.seal(id, Some([7; 32]), &mut ram, &mut free);

        let Err(Refusal::Rejected(r)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.field, "sha256");
        assert!(r.message.contains("not 0707"), "{}", r.message);
        assert!(store.get(id).is_none());
        assert_eq!(free.total(), 16 * MIB);
        assert!(ram.0[(14 * MIB) as usize..].iter().all(|&b| b == 0));
    }

    #[test]
    fn an_image_cut_short_is_refused_naming_the_bytes_written() {
        let (mut store, mut ram, mut free) = setup();
        let id = store.create(ImageKind::Kernel, 4, &mut free).unwrap();
        store.write(id, 0, b"ab", &mut ram).unwrap();

        let Err(Refusal::Rejected(r)) = store.seal(id, None, &mut ram, &mut free) else {
            panic!()
        };

        assert_eq!(r.field, "size");
        assert_eq!(r.message, "image 1: 2 of its 4 bytes were written");
        assert!(store.view(id).is_none());
    }

    #[test]
    fn unsealed_images_cannot_be_viewed_and_boot_images_not_deleted() {
        let (mut store, mut ram, mut free) = setup();
        let id = store.create(ImageKind::Kernel, 4, &mut free).unwrap();

        assert!(store.view(id).is_none());
        assert!(store.view(0).is_some());
        assert_eq!(store.delete(0, &mut ram, &mut free), Err(AbiError::Denied));
        assert_eq!(store.delete(id, &mut ram, &mut free), Ok(()));
        assert_eq!(free.total(), 16 * MIB);
        assert_eq!(
            store.create(ImageKind::Kernel, 4, &mut free),
            Ok(2),
            "ids are not reused"
        );
    }

    #[test]
    fn sizes_of_zero_over_the_cap_or_beyond_free_ram_are_refused() {
        let (mut store, _, mut free) = setup();
        assert_eq!(
            store.create(ImageKind::Kernel, 0, &mut free),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(
            store.create(ImageKind::Kernel, MAX_IMAGE + 1, &mut free),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(
            store.create(ImageKind::Kernel, 17 * MIB, &mut free),
            Err(AbiError::NoResources)
        );
    }
}
