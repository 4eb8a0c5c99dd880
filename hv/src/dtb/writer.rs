//! A flattened device tree (DTB, version 17) writer: nodes and properties in,
//! a blob Linux and U-Boot accept out (devicetree specification v0.4, ch. 5).
//!
//! A partition's DTB is written at each partition (re)start, so the writer
//! allocates per blob, not per property: values go straight into the
//! structure block, and the checks for repeated names compare against what
//! is already written (property-name offsets of the innermost node, child
//! names in the structure block) instead of keeping copies. The blob is
//! laid out in one buffer as it is written (header and reservation block
//! first, then the structure block), so `finish` appends the strings and
//! fills the header in place instead of copying everything once more.

use alloc::string::ToString;
use alloc::vec::Vec;

use super::DtbError;

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_END: u32 = 0x9;
/// The header is ten big-endian u32 fields.
const HEADER_SIZE: usize = 40;
const VERSION: u32 = 17;
/// Version 17 blobs are readable by version-16 parsers (spec 5.2).
const LAST_COMP_VERSION: u32 = 16;
/// Room reserved up front: a partition's DTB is a few KiB.
const STRUCTURE_CAPACITY: usize = 4096;
const STRINGS_CAPACITY: usize = 512;

/// Proof that a node is open; `end_node` consumes it, so a node cannot be
/// closed twice, and closing anything but the innermost node is an error.
#[must_use = "a node must be closed with FdtWriter::end_node"]
#[derive(Debug, PartialEq, Eq)]
pub struct NodeToken {
    id: u32,
}

/// One node still open.
struct OpenNode {
    id: u32,
    has_child: bool,
    /// Where its children's names start in `FdtWriter::child_names`.
    first_child: usize,
}

/// Builds a DTB in memory: open nodes, add properties, close nodes, finish.
pub struct FdtWriter {
    /// The blob so far: room for the header, the reservation block with its
    /// terminator, then the structure block from `struct_start` on.
    blob: Vec<u8>,
    struct_start: usize,
    strings: Vec<u8>,
    /// (offset, length) in `strings` of each property name, stored once.
    names: Vec<(u32, u32)>,
    /// Name offsets of the innermost open node's properties: properties
    /// precede children, so no other open node can take one any more.
    node_props: Vec<u32>,
    /// (offset in the structure block, length) of the names of the open
    /// nodes' children, grouped by open node (`OpenNode::first_child`).
    child_names: Vec<(u32, u32)>,
    /// How many /memreserve/ entries the reservation block holds.
    mem_reserve_count: usize,
    open: Vec<OpenNode>,
    root_written: bool,
    next_node_id: u32,
    next_phandle: u32,
}

impl Default for FdtWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl FdtWriter {
    pub fn new() -> Self {
        let struct_start = HEADER_SIZE + 16;
        let mut blob = Vec::with_capacity(struct_start + STRUCTURE_CAPACITY + STRINGS_CAPACITY);
        // The header is filled in by `finish`; the zeros after it are the
        // reservation block's (0, 0) terminator.
        blob.resize(struct_start, 0);
        FdtWriter {
            blob,
            struct_start,
            strings: Vec::with_capacity(STRINGS_CAPACITY),
            names: Vec::new(),
            node_props: Vec::new(),
            child_names: Vec::new(),
            mem_reserve_count: 0,
            open: Vec::new(),
            root_written: false,
            next_node_id: 0,
            // phandle 0 and 0xffff_ffff are invalid (spec 2.3.3).
            next_phandle: 1,
        }
    }

    /// Adds a /memreserve/ entry: memory the OS must not use. (Cheapest
    /// before the root node: later, the structure block written so far
    /// moves up by one entry.)
    pub fn add_mem_reserve(&mut self, addr: u64, size: u64) {
        let mut entry = [0u8; 16];
        entry[..8].copy_from_slice(&addr.to_be_bytes());
        entry[8..].copy_from_slice(&size.to_be_bytes());
        let at = HEADER_SIZE + 16 * self.mem_reserve_count;
        self.blob.splice(at..at, entry);
        self.mem_reserve_count += 1;
        self.struct_start += 16;
    }

    /// Opens a node inside the innermost open one. The root is named "" and
    /// must be the first and only top-level node.
    pub fn begin_node(&mut self, name: &str) -> Result<NodeToken, DtbError> {
        match self.open.last_mut() {
            None => {
                if self.root_written || !name.is_empty() {
                    return Err(DtbError::MisplacedRoot);
                }
                self.root_written = true;
            }
            Some(parent) => {
                check_node_name(name)?;
                let structure = &self.blob[self.struct_start..];
                let repeated = self.child_names[parent.first_child..]
                    .iter()
                    .any(|&(at, len)| {
                        &structure[at as usize..(at + len) as usize] == name.as_bytes()
                    });
                if repeated {
                    return Err(DtbError::DuplicateNode(name.to_string()));
                }
                parent.has_child = true;
            }
        }
        self.push_u32(FDT_BEGIN_NODE);
        let name_at = self.offset_u32(self.blob.len() - self.struct_start)?;
        self.blob.extend_from_slice(name.as_bytes());
        self.blob.push(0);
        self.pad_structure();
        if !self.open.is_empty() {
            self.child_names.push((name_at, name.len() as u32));
        }
        self.node_props.clear();
        let id = self.next_node_id;
        self.next_node_id = self.next_node_id.wrapping_add(1);
        self.open.push(OpenNode {
            id,
            has_child: false,
            first_child: self.child_names.len(),
        });
        Ok(NodeToken { id })
    }

    /// Closes the innermost open node.
    pub fn end_node(&mut self, node: NodeToken) -> Result<(), DtbError> {
        match self.open.last() {
            Some(innermost) if innermost.id == node.id => {
                self.child_names.truncate(innermost.first_child);
                self.open.pop();
                self.push_u32(FDT_END_NODE);
                Ok(())
            }
            _ => Err(DtbError::UnbalancedEndNode),
        }
    }

    /// Adds a property with a raw value to the innermost open node.
    pub fn prop(&mut self, name: &str, value: &[u8]) -> Result<(), DtbError> {
        self.begin_prop(name, value.len())?;
        self.blob.extend_from_slice(value);
        self.pad_structure();
        Ok(())
    }

    /// An empty property: a flag such as `interrupt-controller`.
    pub fn prop_null(&mut self, name: &str) -> Result<(), DtbError> {
        self.prop(name, &[])
    }

    pub fn prop_u32(&mut self, name: &str, value: u32) -> Result<(), DtbError> {
        self.prop(name, &value.to_be_bytes())
    }

    /// A 64-bit value as two cells, most significant first.
    pub fn prop_u64(&mut self, name: &str, value: u64) -> Result<(), DtbError> {
        self.prop(name, &value.to_be_bytes())
    }

    pub fn prop_cells(&mut self, name: &str, cells: &[u32]) -> Result<(), DtbError> {
        let len = cells.len().checked_mul(4).ok_or(DtbError::TooLarge)?;
        self.begin_prop(name, len)?;
        for cell in cells {
            self.blob.extend_from_slice(&cell.to_be_bytes());
        }
        Ok(())
    }

    pub fn prop_string(&mut self, name: &str, value: &str) -> Result<(), DtbError> {
        self.prop_strings(name, &[value])
    }

    /// A string list: each string NUL-terminated, back to back.
    pub fn prop_strings(&mut self, name: &str, values: &[&str]) -> Result<(), DtbError> {
        let mut len = 0usize;
        for value in values {
            if value.as_bytes().contains(&0) {
                return Err(DtbError::NulInString);
            }
            len = len.saturating_add(value.len() + 1);
        }
        self.begin_prop(name, len)?;
        for value in values {
            self.blob.extend_from_slice(value.as_bytes());
            self.blob.push(0);
        }
        self.pad_structure();
        Ok(())
    }

    /// A fresh phandle for a node that others will reference.
    pub fn alloc_phandle(&mut self) -> u32 {
        let phandle = self.next_phandle;
        self.next_phandle += 1;
        phandle
    }

    /// Lays out header, memory reservation block, structure block and strings
    /// block (spec 5.1), in that order.
    pub fn finish(mut self) -> Result<Vec<u8>, DtbError> {
        if !self.open.is_empty() {
            return Err(DtbError::UnclosedNodes(self.open.len()));
        }
        if !self.root_written {
            return Err(DtbError::NoRootNode);
        }
        self.push_u32(FDT_END);

        // The reservation block must be 8-byte aligned; the header's 40 bytes
        // already are. The structure block follows it 4-byte aligned.
        let off_mem_rsvmap = HEADER_SIZE;
        let off_dt_struct = self.struct_start;
        let off_dt_strings = self.blob.len();
        let structure_len = off_dt_strings - off_dt_struct;
        let total = off_dt_strings + self.strings.len();

        let to_u32 = |v: usize| u32::try_from(v).map_err(|_| DtbError::TooLarge);
        let header = [
            FDT_MAGIC,
            to_u32(total)?,
            to_u32(off_dt_struct)?,
            to_u32(off_dt_strings)?,
            to_u32(off_mem_rsvmap)?,
            VERSION,
            LAST_COMP_VERSION,
            0, // boot_cpuid_phys: the boot vCPU is always cpu@0.
            to_u32(self.strings.len())?,
            to_u32(structure_len)?,
        ];

        let mut blob = self.blob;
        for (slot, field) in blob.chunks_exact_mut(4).zip(header) {
            slot.copy_from_slice(&field.to_be_bytes());
        }
        blob.extend_from_slice(&self.strings);
        Ok(blob)
    }

    /// Checks a property of `len` bytes may be added to the innermost node
    /// and writes its FDT_PROP header; the caller writes the value (and
    /// pads unless it is a multiple of 4 bytes).
    fn begin_prop(&mut self, name: &str, len: usize) -> Result<(), DtbError> {
        // A name already in the strings block passed the check when added.
        let stored = self.find_name(name);
        if stored.is_none() {
            check_property_name(name)?;
        }
        let node = self.open.last_mut().ok_or(DtbError::PropertyOutsideNode)?;
        if node.has_child {
            return Err(DtbError::PropertyAfterChild(name.to_string()));
        }
        let name_offset = match stored {
            Some(offset) => offset,
            None => self.add_name(name)?,
        };
        if self.node_props.contains(&name_offset) {
            return Err(DtbError::DuplicateProperty(name.to_string()));
        }
        self.node_props.push(name_offset);
        let len = u32::try_from(len).map_err(|_| DtbError::TooLarge)?;
        self.push_u32(FDT_PROP);
        self.push_u32(len);
        self.push_u32(name_offset);
        Ok(())
    }

    /// The offset of `name` in the strings block, if it is there.
    fn find_name(&self, name: &str) -> Option<u32> {
        let strings = &self.strings;
        self.names
            .iter()
            .find(|&&(at, len)| {
                // Length and first byte before the slice compare (a memcmp
                // call): a guest DTB looks up about 60 names among 40.
                len as usize == name.len()
                    && strings.get(at as usize) == name.as_bytes().first()
                    && &strings[at as usize..(at + len) as usize] == name.as_bytes()
            })
            .map(|&(offset, _)| offset)
    }

    /// Appends `name` to the strings block; its offset.
    fn add_name(&mut self, name: &str) -> Result<u32, DtbError> {
        let offset = self.offset_u32(self.strings.len())?;
        let len = u32::try_from(name.len()).map_err(|_| DtbError::TooLarge)?;
        self.strings.extend_from_slice(name.as_bytes());
        self.strings.push(0);
        self.names.push((offset, len));
        Ok(offset)
    }

    fn offset_u32(&self, offset: usize) -> Result<u32, DtbError> {
        u32::try_from(offset).map_err(|_| DtbError::TooLarge)
    }

    fn push_u32(&mut self, value: u32) {
        self.blob.extend_from_slice(&value.to_be_bytes());
    }

    /// Every token in the structure block starts 4-byte aligned (spec 5.4.1;
    /// the block itself starts 8-byte aligned in the blob).
    fn pad_structure(&mut self) {
        let padded = self.blob.len().next_multiple_of(4);
        self.blob.resize(padded, 0);
    }
}

fn check_node_name(name: &str) -> Result<(), DtbError> {
    if name.as_bytes().contains(&0) {
        return Err(DtbError::NulInName);
    }
    let valid = !name.is_empty()
        && !name.starts_with('@')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b",._+-@".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(DtbError::InvalidNodeName(name.to_string()))
    }
}

fn check_property_name(name: &str) -> Result<(), DtbError> {
    if name.as_bytes().contains(&0) {
        return Err(DtbError::NulInName);
    }
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b",._+?#-".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(DtbError::InvalidPropertyName(name.to_string()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::string::String;

    fn be32(blob: &[u8], offset: usize) -> u32 {
        u32::from_be_bytes([
            blob[offset],
            blob[offset + 1],
            blob[offset + 2],
            blob[offset + 3],
        ])
    }

    fn small_tree() -> Vec<u8> {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        w.prop_u32("#address-cells", 2).unwrap();
        w.prop_u32("#size-cells", 2).unwrap();
        let a = w.begin_node("a@1").unwrap();
        w.prop_u32("#size-cells", 1).unwrap();
        w.end_node(a).unwrap();
        let b = w.begin_node("b").unwrap();
        w.prop_u32("#size-cells", 0).unwrap();
        w.end_node(b).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn header_records_v17_sizes_and_boot_cpu_zero() {
        let blob = small_tree();

        assert_eq!(be32(&blob, 0), FDT_MAGIC);
        assert_eq!(be32(&blob, 4) as usize, blob.len());
        assert_eq!(be32(&blob, 20), 17);
        assert_eq!(be32(&blob, 24), 16);
        assert_eq!(be32(&blob, 28), 0);
        let (off_struct, off_strings) = (be32(&blob, 8), be32(&blob, 12));
        assert_eq!(off_struct % 4, 0);
        assert_eq!(off_struct + be32(&blob, 36), off_strings);
        assert_eq!(off_strings + be32(&blob, 32), be32(&blob, 4));
    }

    #[test]
    fn repeated_property_names_are_stored_once_in_strings_block() {
        let blob = small_tree();

        let fdt = fdt::Fdt::new(&blob).unwrap();
        let names: Vec<&str> = fdt.strings().collect();
        assert_eq!(names, ["#address-cells", "#size-cells"]);
    }

    #[test]
    fn written_tree_parses_back_with_values() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        w.prop_null("flag").unwrap();
        w.prop_u64("big", 0x1122_3344_5566_7788).unwrap();
        w.prop_cells("cells", &[1, 2, 3]).unwrap();
        w.prop_strings("compatible", &["x,one", "x,two"]).unwrap();
        let child = w.begin_node("child@10").unwrap();
        w.prop_string("label", "odd").unwrap();
        w.end_node(child).unwrap();
        w.end_node(root).unwrap();

        let blob = w.finish().unwrap();

        let fdt = fdt::Fdt::new(&blob).unwrap();
        let root = fdt.find_node("/").unwrap();
        assert_eq!(root.property("flag").unwrap().value, b"");
        assert_eq!(
            root.property("big").unwrap().as_usize(),
            Some(0x1122_3344_5566_7788)
        );
        assert_eq!(
            root.property("cells").unwrap().value,
            [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]
        );
        let compat: Vec<&str> = root.compatible().unwrap().all().collect();
        assert_eq!(compat, ["x,one", "x,two"]);
        let child = fdt.find_node("/child@10").unwrap();
        assert_eq!(child.property("label").unwrap().as_str(), Some("odd"));
    }

    #[test]
    fn mem_reserve_entries_appear_in_reservation_block() {
        let mut w = FdtWriter::new();
        w.add_mem_reserve(0x4000_0000, 0x1000);
        let root = w.begin_node("").unwrap();
        w.end_node(root).unwrap();

        let blob = w.finish().unwrap();

        let fdt = fdt::Fdt::new(&blob).unwrap();
        let reservations: Vec<(usize, usize)> = fdt
            .memory_reservations()
            .map(|r| (r.address() as usize, r.size()))
            .collect();
        assert_eq!(reservations, [(0x4000_0000, 0x1000)]);
    }

    #[test]
    fn mem_reserve_added_inside_the_tree_still_precedes_the_structure_block() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        let a = w.begin_node("a").unwrap();
        w.add_mem_reserve(0x4000_0000, 0x1000);
        w.prop_u32("x", 7).unwrap();
        w.end_node(a).unwrap();
        w.end_node(root).unwrap();

        let blob = w.finish().unwrap();

        let fdt = fdt::Fdt::new(&blob).unwrap();
        let reservations: Vec<(usize, usize)> = fdt
            .memory_reservations()
            .map(|r| (r.address() as usize, r.size()))
            .collect();
        assert_eq!(reservations, [(0x4000_0000, 0x1000)]);
        let x = fdt.find_node("/a").unwrap().property("x").unwrap();
        assert_eq!(x.as_usize(), Some(7));
    }

    #[test]
    fn phandles_are_distinct_and_never_zero() {
        let mut w = FdtWriter::new();

        let (a, b) = (w.alloc_phandle(), w.alloc_phandle());

        assert_ne!(a, 0);
        assert_ne!(a, b);
    }

    #[test]
    fn finish_with_open_node_is_unclosed_error() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();

        assert_eq!(w.finish(), Err(DtbError::UnclosedNodes(1)));
    }

    #[test]
    fn finish_without_root_is_error() {
        assert_eq!(FdtWriter::new().finish(), Err(DtbError::NoRootNode));
    }

    #[test]
    fn closing_outer_node_before_inner_is_unbalanced() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        let _inner = w.begin_node("inner").unwrap();

        assert_eq!(w.end_node(root), Err(DtbError::UnbalancedEndNode));
    }

    #[test]
    fn property_before_any_node_is_rejected() {
        let mut w = FdtWriter::new();

        assert_eq!(w.prop_u32("x", 1), Err(DtbError::PropertyOutsideNode));
    }

    #[test]
    fn property_after_root_closed_is_rejected() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        w.end_node(root).unwrap();

        assert_eq!(w.prop_u32("x", 1), Err(DtbError::PropertyOutsideNode));
    }

    #[test]
    fn property_after_child_node_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();
        let child = w.begin_node("child").unwrap();
        w.end_node(child).unwrap();

        assert_eq!(
            w.prop_u32("late", 1),
            Err(DtbError::PropertyAfterChild("late".into()))
        );
    }

    #[test]
    fn second_root_is_rejected() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        w.end_node(root).unwrap();

        assert_eq!(w.begin_node(""), Err(DtbError::MisplacedRoot));
    }

    #[test]
    fn named_top_level_node_is_rejected() {
        assert_eq!(
            FdtWriter::new().begin_node("cpus"),
            Err(DtbError::MisplacedRoot)
        );
    }

    #[test]
    fn node_name_with_nul_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();

        assert_eq!(w.begin_node("a\0b"), Err(DtbError::NulInName));
    }

    #[test]
    fn property_name_with_nul_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();

        assert_eq!(w.prop_null("a\0b"), Err(DtbError::NulInName));
    }

    #[test]
    fn node_name_with_slash_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();

        assert_eq!(
            w.begin_node("a/b"),
            Err(DtbError::InvalidNodeName("a/b".into()))
        );
    }

    #[test]
    fn empty_child_name_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();

        assert_eq!(w.begin_node(""), Err(DtbError::InvalidNodeName("".into())));
    }

    #[test]
    fn string_value_with_nul_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();

        assert_eq!(
            w.prop_string("bootargs", "a\0b"),
            Err(DtbError::NulInString)
        );
    }

    #[test]
    fn duplicate_property_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();
        w.prop_u32("x", 1).unwrap();

        assert_eq!(
            w.prop_u32("x", 2),
            Err(DtbError::DuplicateProperty("x".into()))
        );
    }

    #[test]
    fn duplicate_sibling_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();
        let a = w.begin_node("uart@0").unwrap();
        w.end_node(a).unwrap();

        assert_eq!(
            w.begin_node("uart@0"),
            Err(DtbError::DuplicateNode("uart@0".into()))
        );
    }

    #[test]
    fn same_name_under_different_parents_is_allowed() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        for parent in ["p", "q"] {
            let p = w.begin_node(parent).unwrap();
            let c = w.begin_node("c").unwrap();
            w.end_node(c).unwrap();
            w.end_node(p).unwrap();
        }
        w.end_node(root).unwrap();

        assert!(w.finish().is_ok());
    }

    #[test]
    fn a_sibling_repeating_a_name_after_a_closed_subtree_is_rejected() {
        let mut w = FdtWriter::new();
        let _root = w.begin_node("").unwrap();
        let p = w.begin_node("p").unwrap();
        let c = w.begin_node("c").unwrap();
        w.end_node(c).unwrap();
        w.end_node(p).unwrap();

        let c = w.begin_node("c").unwrap();
        w.end_node(c).unwrap();

        assert_eq!(w.begin_node("p"), Err(DtbError::DuplicateNode("p".into())));
    }

    #[test]
    fn a_child_may_repeat_a_property_name_of_its_parent() {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        w.prop_u32("x", 1).unwrap();
        let child = w.begin_node("c").unwrap();

        assert_eq!(w.prop_u32("x", 2), Ok(()));
        assert_eq!(
            w.prop_u32("x", 3),
            Err(DtbError::DuplicateProperty("x".into()))
        );
        w.end_node(child).unwrap();
        w.end_node(root).unwrap();
    }

    #[test]
    fn blob_decompiles_with_dtc_when_available() {
        // dtc is the reference parser; it is optional on build hosts.
        let blob = small_tree();
        let Some(dts) = dtc_decompile(&blob) else {
            return;
        };

        assert!(dts.contains("a@1 {"), "{dts}");
        assert!(dts.contains("#size-cells = <0x00>;"), "{dts}");
    }

    /// Decompiles a blob with `dtc -I dtb -O dts`; None when dtc is absent.
    pub(crate) fn dtc_decompile(blob: &[u8]) -> Option<String> {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new("dtc")
            .args(["-I", "dtb", "-O", "dts", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(blob).ok()?;
        let out = child.wait_with_output().ok()?;
        assert!(
            out.status.success(),
            "dtc rejected the blob: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
