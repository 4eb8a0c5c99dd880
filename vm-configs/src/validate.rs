//! The checks of a TOML config that need no image file: the board's CPUs
//! and RAM, that there is a partition, and every per-partition rule, which
//! is `rules::check_partition` (the `no_std` rules the hypervisor and the
//! manager run on partitions created at run time) applied to each
//! partition's plan entry (`PartitionConfig::plan_entry`, the conversion
//! the payload uses) in file order, with the partitions before it as the
//! others. Only the token's text, which the plan holds as a digest, is
//! checked here, where the rules check the token. Also the RAM budget
//! against the board once the payload's size is known. Placement on the
//! host is `isolation`'s.

use crate::error::ConfigError;
use crate::plan::{KernelFormat, KernelPlan, PartitionPlan};
use crate::plan::{LifecyclePlan, RestartMode};
use crate::rules::{self, HostLimits, Problem, Rejection, Size, RAM_GRANULE};
use crate::schema::{Config, PartitionConfig, RestartSetting};

/// RAM the hypervisor keeps for itself before the payload: its image, stacks,
/// heap, stage-2 tables and per-partition DTBs. The whole reserve is this
/// plus the payload size rounded up to `RAM_GRANULE`.
pub const HYPERVISOR_RESERVE_BASE: u64 = 64 * Size::MIB;

/// Shorthand for a partition error.
pub(crate) fn partition_error(
    partition: &PartitionConfig,
    field: impl Into<String>,
    problem: Problem,
) -> ConfigError {
    ConfigError::Partition(rejection(partition, field, problem))
}

fn rejection(partition: &PartitionConfig, field: impl Into<String>, problem: Problem) -> Rejection {
    Rejection {
        partition: partition.name.clone(),
        field: field.into(),
        problem,
    }
}

impl Config {
    /// Checks every rule that needs no image file, in file order, and
    /// reports the first broken one (also the manager's check of an
    /// imported configuration, `PUT /api/v1/config`).
    pub fn check_static(&self) -> Result<(), ConfigError> {
        self.check_board()?;
        if self.partitions.is_empty() {
            return Err(ConfigError::NoPartitions);
        }
        let host = HostLimits {
            board: &self.board.name,
            cpus: self.board.cpus,
        };
        // The rules do not look at images; they are probed later.
        let no_image = KernelPlan {
            image: 0,
            format: KernelFormat::Raw,
        };
        let mut accepted: Vec<PartitionPlan> = Vec::with_capacity(self.partitions.len());
        for partition in &self.partitions {
            let mut entry = partition.plan_entry(no_image.clone(), None);
            // A `token_sha256` that is not hex is still a token to the
            // rules (only the management partition may have one); what is
            // wrong with its text is `check_token_text`'s.
            if partition.token_sha256.is_some() {
                entry.token_sha256.get_or_insert([0; 32]);
            }
            // The management partition takes neither `restart` nor
            // `restart_limit`, not even at their defaults: written at all,
            // they count as a policy for the rules.
            if partition.management {
                if partition.restart.is_some() {
                    entry.lifecycle.restart = RestartMode::OnCrash;
                }
                if partition.restart_limit.is_some() {
                    entry.lifecycle.restart_limit = entry.lifecycle.restart_limit.max(1);
                }
            }
            let others: Vec<&PartitionPlan> = accepted.iter().collect();
            let token_text = || check_token_text(partition);
            rules::check_partition_with_token_text(&entry, &others, &host, token_text).map_err(
                |mut broken| {
                    // The plan's `token_sha256` is written `token` in the
                    // TOML when the plan holds the token itself.
                    if broken.problem == Problem::TokenWithoutManagement
                        && partition.token.is_some()
                    {
                        broken.field = "token".into();
                    }
                    ConfigError::Partition(broken)
                },
            )?;
            accepted.push(entry);
        }
        Ok(())
    }

    fn check_board(&self) -> Result<(), ConfigError> {
        if self.board.cpus == 0 {
            return Err(ConfigError::Board {
                field: "cpus",
                problem: Problem::NoBoardCpus,
            });
        }
        rules::ram_problem(self.board.memory).map_or(Ok(()), |problem| {
            Err(ConfigError::Board {
                field: "memory",
                problem,
            })
        })
    }

    /// Checks that the partitions plus the hypervisor's reserve fit in the
    /// board's RAM; the error names the first partition that does not fit.
    pub(crate) fn check_memory_fit(&self, payload_len: u64) -> Result<(), ConfigError> {
        let reserve = hypervisor_reserve(payload_len);
        let mut partitions_total: u64 = 0;
        for partition in &self.partitions {
            partitions_total = partitions_total.saturating_add(partition.memory.bytes());
            if partitions_total.saturating_add(reserve) > self.board.memory.bytes() {
                return Err(partition_error(
                    partition,
                    "memory",
                    Problem::MemoryExhausted {
                        partitions: Size(partitions_total),
                        reserve: Size(reserve),
                        board: self.board.memory,
                    },
                ));
            }
        }
        Ok(())
    }
}

/// The RAM the hypervisor keeps: `HYPERVISOR_RESERVE_BASE` plus the payload
/// rounded up to `RAM_GRANULE`.
pub fn hypervisor_reserve(payload_len: u64) -> u64 {
    HYPERVISOR_RESERVE_BASE.saturating_add(align_up(payload_len, RAM_GRANULE))
}

pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align).saturating_mul(align)
}

/// The token as written in the TOML, which the plan only carries as a
/// digest: `token` is 16 to 128 characters of [A-Za-z0-9._~-], and
/// `token_sha256` is 64 hex digits and not given together with `token`.
/// Whether the partition may have a token at all is a rule
/// (`TokenWithoutManagement`) of the plan entry; the rules run this check
/// right after that one.
fn check_token_text(partition: &PartitionConfig) -> Result<(), Rejection> {
    if let Some(token) = &partition.token {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "._~-".contains(c);
        if !(16..=128).contains(&token.len()) || !token.chars().all(ok_char) {
            return Err(rejection(partition, "token", Problem::BadToken));
        }
    }
    if let Some(digest) = &partition.token_sha256 {
        if partition.token.is_some() {
            return Err(rejection(partition, "token_sha256", Problem::TokenTwice));
        }
        if crate::bundle::parse_hex32(digest).is_none() {
            return Err(rejection(
                partition,
                "token_sha256",
                Problem::BadTokenDigest,
            ));
        }
    }
    Ok(())
}

impl PartitionConfig {
    /// The lifecycle the plan blob carries (checked by the rules,
    /// `rules::check_partition`).
    pub fn lifecycle(&self) -> LifecyclePlan {
        LifecyclePlan {
            restart: match self.restart {
                None | Some(RestartSetting::Never) => RestartMode::Never,
                Some(RestartSetting::OnCrash) => RestartMode::OnCrash,
                Some(RestartSetting::Always) => RestartMode::Always,
            },
            restart_limit: self.restart_limit.unwrap_or(0),
            watchdog_s: self.watchdog_s,
            shutdown_timeout_s: self.shutdown_timeout_s,
        }
    }

    /// The SHA-256 of the management token the plan blob carries: of
    /// `token`, or `token_sha256` as given (both were validated).
    pub fn token_digest(&self) -> Option<[u8; 32]> {
        match (&self.token, &self.token_sha256) {
            (Some(token), _) => Some(crate::bundle::token_digest(token.as_bytes())),
            (None, Some(hex)) => crate::bundle::parse_hex32(hex),
            (None, None) => None,
        }
    }
}
