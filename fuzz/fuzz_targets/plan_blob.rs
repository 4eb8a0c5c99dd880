//! The runtime plan blob the hypervisor decodes at boot (and the manager
//! sends for run-time partitions): any bytes decode or are refused, never
//! a panic; a decoded plan goes through the per-partition rules and the
//! isolation check against an empty host.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_config::Plan;

fuzz_target!(|data: &[u8]| {
    if let Ok(plan) = Plan::decode(data) {
        let host = pinfold_config::isolation::HostResources::default();
        let _ = pinfold_config::isolation::check_isolation(&plan.partitions, &host);
        let limits = pinfold_config::HostLimits {
            board: "qemu-virt",
            cpus: 4,
        };
        let others: Vec<&pinfold_config::PartitionPlan> = plan.partitions.iter().collect();
        for (i, p) in plan.partitions.iter().enumerate() {
            let _ = pinfold_config::check_partition(p, &others[..i], &limits);
        }
    }
});
