#!/usr/bin/env python3
"""Captures the ACPI tables edk2 gives Linux on QEMU virt (see README.md).

usage: capture.py GIC_VERSION OUT_DIR   (run from the repository root, after
`cargo xtask provision` and a build that made target/guest/)

Boots the guest kernel through edk2 (ACPI only, no DTB), dumps every
/sys/firmware/acpi/tables/* with busybox od over the serial console, and
writes OUT_DIR/<SIG>.bin plus OUT_DIR/boot.log (Linux's "ACPI:" lines give
the tables' physical addresses).
"""
import os
import re
import select
import subprocess
import sys
import time

gic, out = sys.argv[1], sys.argv[2]
cmd = ["qemu-system-aarch64", "-M", f"virt,virtualization=on,gic-version={gic}",
       "-cpu", "cortex-a72", "-smp", "4", "-m", "2G",
       "-bios", "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd",
       "-kernel", "target/guest/linux/Image", "-initrd", "target/guest/initramfs.cpio.gz",
       "-append", "rdinit=/bin/sh console=ttyAMA0", "-nographic", "-no-reboot"]
qemu = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT)
log, seen = b"", 0


def wait_for(pattern, timeout):
    global log, seen
    end = time.time() + timeout
    while time.time() < end:
        ready, _, _ = select.select([qemu.stdout], [], [], 0.5)
        if ready:
            data = os.read(qemu.stdout.fileno(), 65536)
            if not data:
                break
            log += data
            at = log.find(pattern, seen)
            if at >= 0:
                seen = at + len(pattern)
                return True
    return False


def run(line):
    qemu.stdin.write(line.encode() + b"\n")
    qemu.stdin.flush()
    if not wait_for(b"/ # ", 120):
        sys.exit(f"no prompt after {line!r}")


try:
    if not wait_for(b"/ # ", 240):
        sys.exit("the guest shell did not come up")
    run("busybox mount -t sysfs sys /sys")
    run("busybox dmesg | busybox grep 'ACPI: [A-Z0-9]\\{4\\} 0x'")
    run("for f in /sys/firmware/acpi/tables/*; do [ -f $f ] && "
        "{ echo BEGIN $f; busybox od -An -tx1 -v $f; echo END $f; }; done")
finally:
    qemu.kill()

os.makedirs(out, exist_ok=True)
text = log.decode("latin1").replace("\r", "")
with open(os.path.join(out, "boot.log"), "w") as f:
    f.write(text)
for m in re.finditer(r"\nBEGIN /sys/firmware/acpi/tables/(\w+)\n(.*?)\nEND", text, re.S):
    data = bytes(int(x, 16) for x in m.group(2).split())
    assert len(data) == int.from_bytes(data[4:8], "little"), m.group(1)
    assert sum(data) % 256 == 0, m.group(1)
    with open(os.path.join(out, m.group(1) + ".bin"), "wb") as f:
        f.write(data)
    print(m.group(1), len(data))
