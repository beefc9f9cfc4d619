# Sourced by the device scripts (`. scripts/device-setup.sh NAME...`): nVCOMP from .device/lib,
# no mount left from an earlier call, the builds .devab/NAME.gz unpacked as /tmp/b/NAME, the
# machine described in $OUT/machine.txt, and the real-file data: /dev/shm/real.2g (the first
# 2 GiB of a tar of /usr) and /dev/shm/real.512m.
export SHRINKFS_NVCOMP_LIB=$PWD/.device/lib/libnvcomp.so.6
umount -l /dev/shm/ab/mnt 2>/dev/null; pkill -f "/tmp/b/.* mount" 2>/dev/null; sleep 0.5
mkdir -p /tmp/b
for v in "$@"; do gunzip -c ".devab/$v.gz" > "/tmp/b/$v"; chmod +x "/tmp/b/$v"; done
{ uname -a; nproc; date -u; nvidia-smi -L; } > "$OUT/machine.txt" 2>&1
[ -f /dev/shm/real.2g ] || tar cf - /usr 2>/dev/null | head -c $((2 << 30)) > /dev/shm/real.2g
head -c $((512 << 20)) /dev/shm/real.2g > /dev/shm/real.512m
