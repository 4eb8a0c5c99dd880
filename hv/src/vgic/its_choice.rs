//! Which ITS each CPU uses for its vPE commands and the vSGIs it sends: the
//! lowest-numbered usable ITS in the CPU's own NUMA node (DT `numa-node-id`
//! on the cpu and ITS nodes, ACPI SRAT GICC and GIC ITS affinity, read into
//! `dtb::NumaInfo`), and the lowest-numbered usable ITS when the CPU's node
//! has none or the host names no nodes. "Lowest-numbered" is the ITS's place
//! in the host description (`GicInfo::its`: DT order, MADT order). An MMIO
//! write to another socket's ITS costs about 100 ns more on a two-socket
//! GICv4.1 host (Linux's "Use local 4_1 ITS to generate VSGI", the issue's
//! seed 004: 12% of the IPI latency).
//!
//! Computed once at boot into one entry per CPU (`its::ItsSet::new`, over
//! the ITSes that came up), so the send path reads its own CPU's entry and
//! nothing else (`ItsSet::local_its`).

use alloc::vec::Vec;

use crate::dtb::NumaInfo;

/// `usable[j]`: ITS j can take this traffic (for vSGIs: its GITS_TYPER
/// reports VSGI). Returns, for each of `cpus` CPUs, the index of its ITS
/// (None when no ITS is usable).
pub fn choose(numa: &NumaInfo, cpus: usize, usable: &[bool]) -> Vec<Option<usize>> {
    let fallback = usable.iter().position(|&u| u);
    (0..cpus)
        .map(|c| {
            let node = numa.cpus.get(c).copied().flatten();
            node.and_then(|n| {
                (0..usable.len())
                    .find(|&j| usable[j] && numa.its.get(j).copied().flatten() == Some(n))
            })
            .or(fallback)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Two sockets of four CPUs, nodes 0 and 1; three ITSes: node 1, node
    /// 0, node 1 (the host lists the far one first, as on the seed's machine).
    fn two_sockets() -> NumaInfo {
        NumaInfo {
            cpus: [0, 0, 0, 0, 1, 1, 1, 1].map(Some).to_vec(),
            its: vec![Some(1), Some(0), Some(1)],
        }
    }

    #[test]
    fn every_cpu_gets_the_lowest_numbered_its_of_its_own_node() {
        let chosen = choose(&two_sockets(), 8, &[true; 3]);

        assert_eq!(chosen, [1, 1, 1, 1, 0, 0, 0, 0].map(Some));
    }

    #[test]
    fn an_unusable_its_is_passed_over_for_the_next_in_the_node() {
        let chosen = choose(&two_sockets(), 8, &[false, true, true]);

        assert_eq!(chosen, [1, 1, 1, 1, 2, 2, 2, 2].map(Some));
    }

    #[test]
    fn a_node_without_an_its_and_a_cpu_without_a_node_fall_back_to_the_lowest_numbered() {
        let numa = NumaInfo {
            cpus: vec![Some(0), Some(2), None],
            its: vec![Some(1), Some(0)],
        };

        let chosen = choose(&numa, 4, &[true, true]);

        // CPU 3 is beyond the description: no node either.
        assert_eq!(chosen, [Some(1), Some(0), Some(0), Some(0)]);
        assert_eq!(choose(&numa, 2, &[false, false]), [None, None]);
    }

    #[test]
    fn a_host_without_numa_uses_the_first_usable_its_everywhere() {
        assert_eq!(
            choose(&NumaInfo::default(), 3, &[false, true]),
            [Some(1), Some(1), Some(1)]
        );
    }
}
