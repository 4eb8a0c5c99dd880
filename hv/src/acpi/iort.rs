//! IORT (Arm DEN 0049, IO Remapping Table, revision E.e): how PCIe
//! requester IDs reach SMMUs and ITSes. Each SMMUv3 node becomes an
//! `arm,smmu-v3` host device (`IortSmmuV3::host_device`, the entry the DT
//! path makes of the node, its Model carried as the device's
//! `SmmuModel`: HiSilicon Hi161x, Cavium CN99xx) and the root complex's mappings to an SMMUv3
//! the host bridge's `iommu_map` (`Iort::pci_iommu_map`), which together
//! are what `hv::smmu` finds and programs; the mappings that end in an
//! ITS group, directly or through an SMMUv3, are the host bridge's
//! `msi_map` (`Iort::pci_msi_map`: which ITS each requester ID's MSIs
//! reach, as which DeviceID). A GICv5 host's IWBs (wire-to-MSI bridges) are
//! IORT nodes too (type 7, IORT revision E.g; ACPICA `acpi_iort_iwb`), not
//! MADT entries: `Iort::iwbs` (base, index, namespace path), read but not
//! used (no partition is given an IWB's wires yet, docs/GICV5.md).
//!
//! Nodes are kept by their offset in the table, which is how ID mappings
//! name their output node (`IortIdMapping::output_ref`); every mapping's
//! reference is checked to be the offset of a node.

use alloc::vec::Vec;

use super::{AcpiError, Bytes, Table};
use crate::dtb::{HostDevice, PciIommuMap, PciMsiMap, SmmuModel};

/// Node types (IORT table 4).
const ITS_GROUP: u8 = 0;
const ROOT_COMPLEX: u8 = 2;
const SMMU_V3: u8 = 4;
const IWB: u8 = 7;
/// The IWB node's data: base u64 at 16, IWB index u16 at 24, then the
/// NUL-terminated namespace path.
const IWB_NAME: usize = 26;

/// Node header: type, length, revision, identifier, ID mapping count and
/// offset (IORT 3.1.1).
const NODE_HEADER: usize = 16;
const ID_MAPPING_LEN: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iort {
    pub its_groups: Vec<IortItsGroup>,
    pub smmus: Vec<IortSmmuV3>,
    pub root_complexes: Vec<IortRootComplex>,
    /// GICv5 IWBs.
    pub iwbs: Vec<IortIwb>,
    /// Nodes of other types (named components, SMMUv1/v2, PMCGs, RMRs),
    /// skipped.
    pub other_nodes: usize,
}

/// An ID mapping (IORT 3.1.1.1): `num_ids + 1` input IDs from
/// `input_base` go to the node at `output_ref` from `output_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IortIdMapping {
    pub input_base: u32,
    /// The number of IDs in the range minus one, as the table has it.
    pub num_ids: u32,
    pub output_base: u32,
    /// The output node's offset in the IORT.
    pub output_ref: u32,
    /// Bit 0: single mapping (the input range is ignored).
    pub flags: u32,
}

/// An ITS group: the MADT GIC ITS IDs of its ITSes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IortItsGroup {
    pub offset: u32,
    pub its_ids: Vec<u32>,
}

/// An SMMUv3 (IORT 3.1.1.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IortSmmuV3 {
    pub offset: u32,
    pub base: u64,
    /// Bit 0: COHACC override, bits 2:1: HTTU override, bit 3: proximity
    /// domain valid, bit 4: DeviceID mapping index valid.
    pub flags: u32,
    /// 0 generic, 1 HiSilicon Hi161x, 2 Cavium CN99xx (`SmmuModel`).
    pub model: u32,
    /// GSIVs of the event, PRI, global error and sync interrupts (0: none,
    /// or MSI-signalled).
    pub event_gsiv: u32,
    pub pri_gsiv: u32,
    pub gerr_gsiv: u32,
    pub sync_gsiv: u32,
    pub id_mappings: Vec<IortIdMapping>,
}

/// An SMMUv3's register space: page 0 and page 1, 64 KiB each (the
/// IORT gives only the base). What QEMU's DT `reg` says and what Linux
/// reserves for an IORT SMMUv3 (`arm_smmu_v3_resource_size`), which
/// takes 64 KiB for model 2 only (Cavium CN99xx, no page 1); the whole
/// 128 KiB is kept here for every model: more of the address space is
/// the hypervisor's, never less.
pub const SMMU_V3_FRAME: u64 = 0x2_0000;

impl IortSmmuV3 {
    /// This SMMU as the host device the DT path makes of an `arm,smmu-v3`
    /// node (QEMU's `/smmuv3@9050000`): its frame ([`SMMU_V3_FRAME`]) and
    /// its wired interrupts in the DT binding's order (eventq, priq,
    /// cmdq-sync, gerror), an absent one (GSIV 0: none, or MSI-signalled)
    /// or one that is no SPI left out as the DT path leaves it out. This is
    /// what `smmu_init` programs and the plan check keeps partitions off.
    pub fn host_device(&self) -> HostDevice {
        HostDevice {
            path: alloc::format!("/smmuv3@{:x}", self.base),
            compatible: alloc::vec!["arm,smmu-v3".into()],
            regs: alloc::vec![(self.base, SMMU_V3_FRAME)],
            spis: [
                self.event_gsiv,
                self.pri_gsiv,
                self.sync_gsiv,
                self.gerr_gsiv,
            ]
            .into_iter()
            .filter(|&intid| (32..1020).contains(&intid) || intid >= 4096)
            .collect(),
            enabled: true,
            smmu_model: SmmuModel::from_iort(self.model),
        }
    }
}

/// A GICv5 interrupt wire bridge (IORT node type 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IortIwb {
    pub offset: u32,
    /// Its config frame.
    pub base: u64,
    /// The IWB index: the frame ID in the GSIVs of its wires.
    pub index: u16,
    /// The ACPI namespace path of its device object (`\_SB.IWB0`).
    pub name: alloc::string::String,
    pub id_mappings: Vec<IortIdMapping>,
}

/// A PCIe root complex (IORT 3.1.1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IortRootComplex {
    pub offset: u32,
    /// Memory access properties: cache coherency attribute (1 = coherent).
    pub cca: u32,
    /// Bit 0: ATS supported.
    pub ats: u32,
    pub segment: u32,
    /// Memory address size limit in bits (0 on revision 0 nodes).
    pub memory_address_limit: u8,
    pub id_mappings: Vec<IortIdMapping>,
}

/// IORT header: signature..creator revision, node count, node array offset,
/// reserved.
const IORT_HEADER: usize = 48;

pub(super) fn parse(table: Table<'_>) -> Result<Iort, AcpiError> {
    let t = table.bytes;
    let count = t.u32(36)?;
    let mut offset = t.u32(40)? as usize;
    if t.len() < IORT_HEADER || offset < IORT_HEADER {
        return Err(t.malformed("node array overlaps the header"));
    }
    let mut iort = Iort {
        its_groups: Vec::new(),
        smmus: Vec::new(),
        root_complexes: Vec::new(),
        iwbs: Vec::new(),
        other_nodes: 0,
    };
    let mut node_offsets = Vec::new();
    // Each node takes at least NODE_HEADER bytes of the table, so a huge
    // count ends in `Truncated` after at most len / 16 nodes.
    for _ in 0..count {
        let len = usize::from(t.u16(offset + 1)?);
        if len < NODE_HEADER {
            return Err(t.malformed("node shorter than its header"));
        }
        let node = t.sub(offset, len)?;
        let node_offset = offset as u32; // < MAX_TABLE_LEN
        node_offsets.push(node_offset);
        match node.u8(0)? {
            ITS_GROUP => {
                let n = node.u32(16)? as usize;
                let ids = node.sub(20, n.checked_mul(4).ok_or(ids_overflow(node))?)?;
                iort.its_groups.push(IortItsGroup {
                    offset: node_offset,
                    its_ids: (0..n).map(|k| ids.u32(4 * k)).collect::<Result<_, _>>()?,
                });
            }
            ROOT_COMPLEX => {
                node.u32(28)?;
                iort.root_complexes.push(IortRootComplex {
                    offset: node_offset,
                    cca: node.u32(16)?,
                    ats: node.u32(24)?,
                    segment: node.u32(28)?,
                    memory_address_limit: if node.u8(3)? >= 1 { node.u8(32)? } else { 0 },
                    id_mappings: id_mappings(node)?,
                });
            }
            SMMU_V3 => {
                node.u32(56)?;
                iort.smmus.push(IortSmmuV3 {
                    offset: node_offset,
                    base: node.u64(16)?,
                    flags: node.u32(24)?,
                    model: node.u32(40)?,
                    event_gsiv: node.u32(44)?,
                    pri_gsiv: node.u32(48)?,
                    gerr_gsiv: node.u32(52)?,
                    sync_gsiv: node.u32(56)?,
                    id_mappings: id_mappings(node)?,
                });
            }
            IWB => {
                let base = node.u64(16)?;
                let index = node.u16(24)?;
                let tail = node
                    .data
                    .get(IWB_NAME..)
                    .ok_or(node.malformed("IWB node shorter than its device name"))?;
                let end = tail
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or(node.malformed("IWB node: device name not NUL-terminated"))?;
                let name = core::str::from_utf8(&tail[..end])
                    .map_err(|_| node.malformed("IWB node: device name is not ASCII"))?;
                iort.iwbs.push(IortIwb {
                    offset: node_offset,
                    base,
                    index,
                    name: name.into(),
                    id_mappings: id_mappings(node)?,
                });
            }
            _ => iort.other_nodes += 1,
        }
        offset += len;
    }
    let mappings = iort
        .root_complexes
        .iter()
        .flat_map(|rc| &rc.id_mappings)
        .chain(iort.smmus.iter().flat_map(|s| &s.id_mappings))
        .chain(iort.iwbs.iter().flat_map(|w| &w.id_mappings));
    for m in mappings {
        if !node_offsets.contains(&m.output_ref) {
            return Err(t.malformed("ID mapping to an offset where no node starts"));
        }
    }
    Ok(iort)
}

impl Iort {
    /// The requester ID -> StreamID mappings of PCI segment `segment`'s
    /// root complex into SMMUv3 nodes, as the DT's `iommu-map` gives them.
    /// Single mappings (flag bit 0) and mappings to other nodes (an ITS
    /// group: no SMMU on the path) are left out.
    pub fn pci_iommu_map(&self, segment: u32) -> Vec<PciIommuMap> {
        self.root_complexes
            .iter()
            .filter(|rc| rc.segment == segment)
            .flat_map(|rc| &rc.id_mappings)
            .filter(|m| m.flags & 1 == 0)
            .filter_map(|m| {
                let smmu = self.smmus.iter().find(|s| s.offset == m.output_ref)?;
                Some(PciIommuMap {
                    rid_base: m.input_base,
                    iommu_base: smmu.base,
                    sid_base: m.output_base,
                    len: m.num_ids.checked_add(1)?,
                })
            })
            .collect()
    }

    /// The requester ID -> DeviceID mappings of PCI segment `segment`'s
    /// root complex into ITS groups, as the DT's `msi-map` gives them:
    /// directly (the RC's mapping names the group) or through an SMMUv3
    /// (the RC's StreamIDs through the SMMU's own mappings into a group;
    /// each overlap one entry). A group's ITS is its first (as Linux's
    /// `iort_dev_find_its_id`), named by MADT GIC ITS ID: `its` pairs each
    /// MADT ITS's ID with its base. Single mappings (an SMMU's own MSIs)
    /// are left out, and so are mappings into a group whose ITS the MADT
    /// does not list (those requester IDs get no MSI: the host's own
    /// description of the ITS is missing, not only its routing); a group
    /// with no ITS is refused.
    pub fn pci_msi_map(
        &self,
        segment: u32,
        its: &[(u32, u64)],
    ) -> Result<Vec<PciMsiMap>, AcpiError> {
        let group_base = |at: u32| -> Result<Option<u64>, AcpiError> {
            let Some(g) = self.its_groups.iter().find(|g| g.offset == at) else {
                return Ok(None);
            };
            let id = g
                .its_ids
                .first()
                .ok_or(self.malformed("ITS group with no ITS"))?;
            Ok(its.iter().find(|&&(i, _)| i == *id).map(|&(_, base)| base))
        };
        let mut map = Vec::new();
        let rc_maps = self
            .root_complexes
            .iter()
            .filter(|rc| rc.segment == segment)
            .flat_map(|rc| &rc.id_mappings)
            .filter(|m| m.flags & 1 == 0);
        for m in rc_maps {
            let (rid_base, len) = (m.input_base, u64::from(m.num_ids) + 1);
            if let Some(its_base) = group_base(m.output_ref)? {
                map.push(PciMsiMap {
                    rid_base,
                    its_base,
                    device_base: m.output_base,
                    len: len as u32,
                });
                continue;
            }
            let Some(smmu) = self.smmus.iter().find(|s| s.offset == m.output_ref) else {
                continue;
            };
            // StreamIDs [sid, sid_end) from the RC, through each SMMU
            // mapping's input range into its group.
            let (sid, sid_end) = (u64::from(m.output_base), u64::from(m.output_base) + len);
            for s in smmu.id_mappings.iter().filter(|s| s.flags & 1 == 0) {
                let Some(its_base) = group_base(s.output_ref)? else {
                    continue;
                };
                let (lo, hi) = (
                    u64::from(s.input_base),
                    u64::from(s.input_base) + u64::from(s.num_ids) + 1,
                );
                let (from, to) = (sid.max(lo), sid_end.min(hi));
                if from >= to {
                    continue;
                }
                map.push(PciMsiMap {
                    rid_base: (u64::from(rid_base) + from - sid) as u32,
                    its_base,
                    device_base: (u64::from(s.output_base) + from - lo) as u32,
                    len: (to - from) as u32,
                });
            }
        }
        Ok(map)
    }

    fn malformed(&self, what: &'static str) -> AcpiError {
        AcpiError::Malformed {
            table: super::Signature::IORT,
            what,
        }
    }
}

fn ids_overflow(node: Bytes<'_>) -> AcpiError {
    node.malformed("ITS count overflows")
}

/// A node's ID mapping array, which must lie inside the node.
fn id_mappings(node: Bytes<'_>) -> Result<Vec<IortIdMapping>, AcpiError> {
    let count = node.u32(8)? as usize;
    if count == 0 {
        return Ok(Vec::new());
    }
    let at = node.u32(12)? as usize;
    if at < NODE_HEADER {
        return Err(node.malformed("ID mappings overlap the node header"));
    }
    let array = node.sub(
        at,
        count
            .checked_mul(ID_MAPPING_LEN)
            .ok_or(node.malformed("ID mapping count overflows"))?,
    )?;
    (0..count)
        .map(|k| {
            let m = array.sub(k * ID_MAPPING_LEN, ID_MAPPING_LEN)?;
            Ok(IortIdMapping {
                input_base: m.u32(0)?,
                num_ids: m.u32(4)?,
                output_base: m.u32(8)?,
                output_ref: m.u32(12)?,
                flags: m.u32(16)?,
            })
        })
        .collect()
}
