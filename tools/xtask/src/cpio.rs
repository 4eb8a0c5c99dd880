//! A writer for the cpio "newc" archive format the Linux initramfs unpacker
//! reads (Documentation/driver-api/early-userspace/buffer-format.rst).

/// Mode bits of the entry kinds the initramfs needs.
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

/// Magic of a newc header without checksums.
const NEWC_MAGIC: &str = "070701";
/// Name of the entry that closes the archive.
const TRAILER: &str = "TRAILER!!!";

/// An in-memory cpio newc archive. Entries are written in the order added;
/// the kernel creates them in that order, so add a directory before its
/// contents. Timestamps are zero so the archive is reproducible.
#[derive(Debug, Default)]
pub struct CpioWriter {
    out: Vec<u8>,
    next_ino: u32,
}

impl CpioWriter {
    pub fn new() -> Self {
        Self {
            out: Vec::new(),
            next_ino: 1,
        }
    }

    /// Adds a directory; `path` has no leading slash (e.g. `"proc"`).
    pub fn dir(&mut self, path: &str, perm: u32) {
        self.entry(path, S_IFDIR | (perm & 0o7777), 2, &[]);
    }

    /// Adds a regular file.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.entry(path, S_IFREG | (perm & 0o7777), 1, data);
    }

    /// Adds a symbolic link whose target is `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, 1, target.as_bytes());
    }

    /// Adds a character device node (e.g. /dev/console, which the kernel
    /// opens for init's stdio before init can mount devtmpfs).
    pub fn char_device(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.push(path, S_IFCHR | (perm & 0o7777), 1, (major, minor), &[]);
    }

    /// Closes the archive with the trailer entry and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.header(TRAILER, 0, 0, 1, (0, 0), 0);
        self.out.extend_from_slice(TRAILER.as_bytes());
        self.out.push(0);
        self.pad4();
        self.out
    }

    fn entry(&mut self, path: &str, mode: u32, nlink: u32, data: &[u8]) {
        self.push(path, mode, nlink, (0, 0), data);
    }

    fn push(&mut self, path: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.header(path, ino, mode, nlink, rdev, data.len() as u32);
        self.out.extend_from_slice(path.as_bytes());
        self.out.push(0);
        // The name is padded so that header + name is a multiple of 4, and
        // the data likewise; the header itself is 110 bytes long.
        self.pad4();
        self.out.extend_from_slice(data);
        self.pad4();
    }

    fn header(
        &mut self,
        name: &str,
        ino: u32,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        filesize: u32,
    ) {
        let namesize = name.len() as u32 + 1;
        // Fields in order: ino mode uid gid nlink mtime filesize devmajor
        // devminor rdevmajor rdevminor namesize check.
        let fields = [
            ino, mode, 0, 0, nlink, 0, filesize, 0, 0, rdev.0, rdev.1, namesize, 0,
        ];
        self.out.extend_from_slice(NEWC_MAGIC.as_bytes());
        for field in fields {
            self.out
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
    }

    fn pad4(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the 8-hex-digit field `index` of the header at `at`.
    fn field(archive: &[u8], at: usize, index: usize) -> u32 {
        let start = at + 6 + index * 8;
        let text = std::str::from_utf8(&archive[start..start + 8]).expect("ascii header");
        u32::from_str_radix(text, 16).expect("hex field")
    }

    #[test]
    fn file_entry_has_newc_magic_name_and_data() {
        let mut cpio = CpioWriter::new();

        cpio.file("init", 0o755, b"#!/bin/sh\n");
        let archive = cpio.finish();

        assert_eq!(&archive[..6], b"070701");
        assert_eq!(field(&archive, 0, 1), 0o100_755);
        assert_eq!(field(&archive, 0, 6), 10);
        assert_eq!(field(&archive, 0, 11), 5);
        assert_eq!(&archive[110..115], b"init\0");
        // 110 + 5 = 115, padded to 116 where the data starts.
        assert_eq!(&archive[116..126], b"#!/bin/sh\n");
    }

    #[test]
    fn every_entry_starts_four_byte_aligned() {
        let mut cpio = CpioWriter::new();
        cpio.dir("proc", 0o755);
        cpio.file("a", 0o644, b"xyz");

        let archive = cpio.finish();

        let magics: Vec<usize> = archive
            .windows(6)
            .enumerate()
            .filter(|(_, w)| *w == b"070701")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(magics.len(), 3);
        assert!(
            magics.iter().all(|offset| offset % 4 == 0),
            "offsets {magics:?}"
        );
    }

    #[test]
    fn symlink_stores_target_as_data() {
        let mut cpio = CpioWriter::new();

        cpio.symlink("bin/sh", "busybox");
        let archive = cpio.finish();

        assert_eq!(field(&archive, 0, 1), 0o120_777);
        assert_eq!(field(&archive, 0, 6), 7);
        // 110 + "bin/sh\0" = 117, padded to 120.
        assert_eq!(&archive[120..127], b"busybox");
    }

    #[test]
    fn char_device_records_major_and_minor_in_rdev() {
        let mut cpio = CpioWriter::new();

        cpio.char_device("dev/console", 0o600, 5, 1);
        let archive = cpio.finish();

        assert_eq!(field(&archive, 0, 1), 0o020_600);
        assert_eq!(field(&archive, 0, 9), 5);
        assert_eq!(field(&archive, 0, 10), 1);
        assert_eq!(field(&archive, 0, 6), 0);
    }

    #[test]
    fn archive_ends_with_trailer_and_is_padded() {
        let archive = CpioWriter::new().finish();

        assert_eq!(archive.len() % 4, 0);
        assert_eq!(&archive[110..121], b"TRAILER!!!\0");
    }

    #[test]
    fn inode_numbers_differ_between_entries() {
        let mut cpio = CpioWriter::new();
        cpio.dir("a", 0o755);
        cpio.dir("b", 0o755);

        let archive = cpio.finish();

        // Second header: 110 + "a\0" padded to 112.
        assert_ne!(field(&archive, 0, 0), field(&archive, 112, 0));
    }
}
