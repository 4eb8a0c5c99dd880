//! Checks a config's image files (that they fit as `fit::place_images` lays
//! them out) and turns the config into the payload the hypervisor reads at
//! boot: header, plan blob, then every distinct image once, 4 KiB aligned
//! (layout in plan.rs).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::fit::{place_images, IMAGE_HEADER_LEN};
use crate::plan::{
    ConsolePlan, DevicePlan, ImageRef, KernelFormat, KernelPlan, MmioRange, PartitionPlan, Plan,
    IMAGE_ALIGN,
};
use crate::rules::Problem;
use crate::schema::{Config, ImageFormat, PartitionConfig};
use crate::validate::{align_up, partition_error};

/// Offset of the arm64 Image magic (Linux Documentation/arch/arm64/booting.rst).
const LINUX_MAGIC_OFFSET: usize = 56;
const LINUX_MAGIC: [u8; 4] = *b"ARM\x64";

/// One distinct image file, in payload order.
struct ImageFile {
    /// Where to read it (root joined with the configured path).
    path: PathBuf,
    size: u64,
    /// Its SHA-256 (the hypervisor lists boot images by it).
    sha256: [u8; 32],
    /// The first partition naming it and the field, for error messages.
    partition: usize,
    field: &'static str,
}

/// The image files of a config, deduplicated, and what each partition uses.
struct Images {
    files: Vec<ImageFile>,
    kernels: Vec<KernelPlan>,
    initrds: Vec<Option<u32>>,
}

/// What probing one configured file found.
struct Probe {
    path: PathBuf,
    /// Canonical path: two spellings of one file share a payload copy.
    key: PathBuf,
    size: u64,
    /// The first bytes (up to the arm64 Image header length).
    head: Vec<u8>,
}

/// A config that passed every check, with its plan laid out.
struct Prepared {
    images: Images,
    plan: Plan,
    header_and_plan: Vec<u8>,
}

impl Config {
    /// Checks everything that can be known before boot: the rules of
    /// docs/CONFIG.md, that every image exists (relative paths resolve
    /// against `root`), kernel formats, that images fit their partition and
    /// that partitions plus the hypervisor's reserve fit the board.
    pub fn validate(&self, root: &Path) -> Result<(), ConfigError> {
        self.prepare(root).map(|_| ())
    }

    /// Validates, reads the images and returns the payload: header, plan,
    /// and each distinct image once at a 4 KiB aligned offset from the
    /// payload start.
    pub fn build_payload(&self, root: &Path) -> Result<Vec<u8>, ConfigError> {
        let prepared = self.prepare(root)?;
        let mut payload = prepared.header_and_plan;
        for (file, image) in prepared.images.files.iter().zip(&prepared.plan.images) {
            payload.resize(image.offset as usize, 0);
            let bytes =
                std::fs::read(&file.path).map_err(|source| self.file_error(file, source))?;
            if bytes.len() as u64 != file.size {
                let changed = io::Error::other("the file changed while the payload was built");
                return Err(self.file_error(file, changed));
            }
            payload.extend_from_slice(&bytes);
        }
        match Plan::decode(&payload) {
            Ok(decoded) if decoded == prepared.plan => Ok(payload),
            Ok(_) => Err(ConfigError::Encoding("the decoded plan differs".into())),
            Err(error) => Err(ConfigError::Encoding(format!("{error:?}"))),
        }
    }

    fn prepare(&self, root: &Path) -> Result<Prepared, ConfigError> {
        self.check_static()?;
        let images = self.probe_images(root)?;
        let (plan, header_and_plan) = self.lay_out(&images);
        let payload_len = plan
            .images
            .iter()
            .map(|image| image.offset + image.size)
            .max()
            .unwrap_or(header_and_plan.len() as u64);
        self.check_memory_fit(payload_len)?;
        Ok(Prepared {
            images,
            plan,
            header_and_plan,
        })
    }

    fn file_error(&self, file: &ImageFile, source: io::Error) -> ConfigError {
        let problem = Problem::FileUnreadable {
            path: file.path.display().to_string(),
            source: source.to_string(),
        };
        match self.partitions.get(file.partition) {
            Some(partition) => partition_error(partition, file.field, problem),
            None => ConfigError::Read {
                path: file.path.clone(),
                source: io::Error::other(problem.to_string()),
            },
        }
    }

    fn probe_images(&self, root: &Path) -> Result<Images, ConfigError> {
        let mut images = Images {
            files: Vec::new(),
            kernels: Vec::new(),
            initrds: Vec::new(),
        };
        let mut by_key: HashMap<PathBuf, u32> = HashMap::new();
        let mut intern = |probe: Probe, partition: usize, field: &'static str| {
            *by_key.entry(probe.key).or_insert_with(|| {
                // Unreadable files are reported when the payload is written.
                let sha256 = std::fs::read(&probe.path)
                    .map(|bytes| crate::bundle::sha256(&bytes))
                    .unwrap_or_default();
                images.files.push(ImageFile {
                    path: probe.path,
                    size: probe.size,
                    sha256,
                    partition,
                    field,
                });
                (images.files.len() - 1) as u32
            })
        };
        let mut kernels = Vec::new();
        let mut initrds = Vec::new();
        for (index, partition) in self.partitions.iter().enumerate() {
            let kernel = probe(partition, "kernel", &partition.kernel, root)?;
            let format = kernel_format(partition, &kernel)?;
            let initrd = partition
                .initrd
                .as_ref()
                .map(|path| probe(partition, "initrd", path, root))
                .transpose()?;
            let initrd_len = initrd.as_ref().map(|probe| probe.size);
            let ram = partition.memory.bytes();
            if let Err(fit) = place_images(&kernel.head, kernel.size, format, initrd_len, ram) {
                return Err(partition_error(
                    partition,
                    "memory",
                    Problem::ImagesDoNotFit {
                        ram: partition.memory,
                        fit,
                    },
                ));
            }
            kernels.push(KernelPlan {
                image: intern(kernel, index, "kernel"),
                format,
            });
            initrds.push(initrd.map(|probe| intern(probe, index, "initrd")));
        }
        images.kernels = kernels;
        images.initrds = initrds;
        Ok(images)
    }

    /// The plan with image offsets, and its encoding with the header. The
    /// offsets depend on the encoded plan's length and the length (postcard
    /// varints) on the offsets, so grow the start until the plan fits before
    /// it; lengths only grow with offsets, so this ends.
    fn lay_out(&self, images: &Images) -> (Plan, Vec<u8>) {
        let mut images_start = 0;
        loop {
            let plan = self.plan_with_images_at(images, images_start);
            let header_and_plan = plan.encode_header_and_plan();
            let needed = align_up(header_and_plan.len() as u64, IMAGE_ALIGN);
            if needed <= images_start {
                return (plan, header_and_plan);
            }
            images_start = needed;
        }
    }

    fn plan_with_images_at(&self, images: &Images, images_start: u64) -> Plan {
        let mut offset = images_start;
        let image_refs = images
            .files
            .iter()
            .map(|file| {
                let image = ImageRef {
                    offset,
                    size: file.size,
                    sha256: file.sha256,
                };
                offset = align_up(offset + file.size, IMAGE_ALIGN);
                image
            })
            .collect();
        let partitions = self
            .partitions
            .iter()
            .zip(images.kernels.iter().zip(&images.initrds))
            .map(|(partition, (kernel, initrd))| partition.plan_entry(kernel.clone(), *initrd))
            .collect();
        Plan {
            partitions,
            images: image_refs,
        }
    }
}

impl PartitionConfig {
    /// The plan entry for this partition, with the kernel and initrd images
    /// at the given indices: what the payload carries and what the rules
    /// (`rules::check_partition`) check. The token fields must have passed
    /// `validate`'s token check (`token_sha256` is the digest of either).
    pub fn plan_entry(&self, kernel: KernelPlan, initrd: Option<u32>) -> PartitionPlan {
        PartitionPlan {
            name: self.name.clone(),
            cpus: self.cpus.clone(),
            ram_size: self.memory.bytes(),
            kernel,
            initrd,
            bootargs: self.bootargs.clone(),
            console: ConsolePlan {
                input: self.console_input,
            },
            devices: self
                .devices
                .iter()
                .map(|device| DevicePlan {
                    name: device.name.clone(),
                    mmio: device
                        .mmio
                        .iter()
                        .map(|range| MmioRange {
                            base: range.base,
                            size: range.size.bytes(),
                        })
                        .collect(),
                    spis: device.spis.clone(),
                    compatible: device.compatible.clone(),
                    host_node: device.host_node.clone(),
                })
                .collect(),
            management: self.management,
            pci_host_bridge: self.pci_host_bridge,
            pci: self.pci.clone(),
            token_sha256: self.token_digest(),
            autostart: self.autostart,
            pmu: self.pmu,
            lifecycle: self.lifecycle(),
            config_store: self.config_store.clone(),
            api_tls: self.api_tls,
            gic: self.gic,
        }
    }
}

/// Finds a configured file and reads its first bytes.
fn probe(
    partition: &PartitionConfig,
    field: &'static str,
    configured: &Path,
    root: &Path,
) -> Result<Probe, ConfigError> {
    let fail = |problem| Err(partition_error(partition, field, problem));
    let shown = configured.display().to_string();
    let unreadable = |source: io::Error| Problem::FileUnreadable {
        path: shown.clone(),
        source: source.to_string(),
    };
    let path = root.join(configured);
    let metadata = match std::fs::metadata(&path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return fail(Problem::FileMissing {
                path: shown.clone(),
            })
        }
        Err(error) => return fail(unreadable(error)),
    };
    if !metadata.is_file() {
        return fail(Problem::NotAFile {
            path: shown.clone(),
        });
    }
    if metadata.len() == 0 {
        return fail(Problem::FileEmpty {
            path: shown.clone(),
        });
    }
    let key = match path.canonicalize() {
        Ok(key) => key,
        Err(error) => return fail(unreadable(error)),
    };
    let mut head = Vec::with_capacity(IMAGE_HEADER_LEN);
    let read = File::open(&path)
        .and_then(|file| file.take(IMAGE_HEADER_LEN as u64).read_to_end(&mut head));
    if let Err(error) = read {
        return fail(unreadable(error));
    }
    Ok(Probe {
        path,
        key,
        size: metadata.len(),
        head,
    })
}

fn has_linux_magic(head: &[u8]) -> bool {
    head.get(LINUX_MAGIC_OFFSET..LINUX_MAGIC_OFFSET + LINUX_MAGIC.len()) == Some(&LINUX_MAGIC)
}

fn kernel_format(partition: &PartitionConfig, kernel: &Probe) -> Result<KernelFormat, ConfigError> {
    let linux = has_linux_magic(&kernel.head);
    match partition.kernel_format {
        ImageFormat::Auto if linux => Ok(KernelFormat::LinuxImage),
        ImageFormat::Auto | ImageFormat::Raw => Ok(KernelFormat::Raw),
        ImageFormat::Linux if linux => Ok(KernelFormat::LinuxImage),
        ImageFormat::Linux => Err(partition_error(
            partition,
            "kernel_format",
            Problem::NotLinuxImage {
                path: partition.kernel.display().to_string(),
            },
        )),
    }
}
