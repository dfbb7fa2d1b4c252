#!/usr/bin/env bash
# tests/vm/image.sh — build (or reuse) the pure cgroup-v2 + systemd test host image: Debian 13
# (trixie) made with mmdebstrap from the apt mirror this host already uses, distro kernel,
# systemd, podman, crun, runc, conmon, docker, containerd, an unprivileged user `tester` with
# subuid/subgid 100000:65536 (lingering, so its systemd user manager is up for rootless podman),
# criu (checkpoint/restore), python3 + pip (serve installs handler packages), python3-dbus + python3-gi for tests/integration's fake systemd), gcc + libc6-dev (tests/security builds its static probe with cc), nodejs
# (tests/compliance/tap-summary.js).
#
#   bash tests/vm/image.sh          prints the image directory on the last line of stdout
#
# The image is cached in $SPROUT_VM_DIR/img-<first 12 hex of sha256(this file)>/ (default
# SPROUT_VM_DIR=/var/tmp/sprout-vm) and rebuilt only when this script changes; a `complete`
# stamp marks a finished build; older img-* dirs are removed after a new one completes.
# Installs its own host packages when missing (apt-get: mmdebstrap qemu-system-x86 qemu-utils
# e2fsprogs openssh-client). Needs root. Build: ~1.5-3 min, ~0.8 GB used (8 GiB sparse file).
# Env: SUITE (trixie; bookworm when the mirror lacks it), MIRROR (the host's first apt URI), SIZE.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VMROOT=${SPROUT_VM_DIR:-/var/tmp/sprout-vm}
HASH=$(sha256sum "$HERE/image.sh" | cut -c1-12)
IMG=$VMROOT/img-$HASH
log() { echo "image: $*" >&2; }

if [ -f "$IMG/complete" ]; then echo "$IMG"; exit 0; fi
[ "$(id -u)" = 0 ] || { log "needs root"; exit 2; }

need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v ssh >/dev/null && command -v scp >/dev/null && command -v ssh-keygen >/dev/null || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  log "installing host packages: ${need[*]}"
  # other jobs may be using apt/dpkg at the same time: wait for the lock, retry once
  A=(-o DPkg::Lock::Timeout=600)
  apt-get "${A[@]}" update -qq >&2 || true
  for try in 1 2 3; do
    DEBIAN_FRONTEND=noninteractive apt-get "${A[@]}" install -y -qq --no-install-recommends "${need[@]}" >&2 && break
    [ $try = 3 ] && { log "apt-get install failed"; exit 1; }
    dpkg --configure -a >&2 || true; sleep 5
  done
fi

SUITE=${SUITE:-trixie}
MIRROR=${MIRROR:-$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}' || true)}
[ -n "$MIRROR" ] || { log "no Debian mirror in the host's apt sources; set MIRROR"; exit 1; }
SIZE=${SIZE:-8G}

# build under a temp name, rename when done (a killed build never looks complete)
mkdir -p "$VMROOT"
exec 9>"$VMROOT/build.lock"
flock 9
if [ -f "$IMG/complete" ]; then echo "$IMG"; exit 0; fi
WORK=$IMG.tmp
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
t0=$(date +%s)

if command -v curl >/dev/null && ! curl -fsI "$MIRROR/dists/$SUITE/InRelease" >/dev/null; then
  log "suite $SUITE not served by $MIRROR, falling back to bookworm"; SUITE=bookworm
fi

PKGS=(
  systemd systemd-sysv udev dbus dbus-user-session libpam-systemd
  linux-image-amd64 initramfs-tools kmod
  openssh-server openssh-sftp-server
  iproute2 procps less psmisc strace jq hyperfine util-linux e2fsprogs bc sudo
  python3 python3-pip python3-dbus python3-gi libseccomp2 ca-certificates zstd nodejs
  gcc libc6-dev
  podman crun runc conmon uidmap passt slirp4netns netavark aardvark-dns nftables iptables
  fuse-overlayfs catatonit containers-storage golang-github-containers-common
  busybox-static criu
  docker.io docker-cli containerd
)

[ -f id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f id_ed25519 -C sprout-vm
mkdir rootfs
mmdebstrap --mode=root --variant=apt --format=directory \
  --include="$(IFS=,; echo "${PKGS[*]}")" \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  "$SUITE" rootfs "deb $MIRROR $SUITE main" >&2
t1=$(date +%s); log "mmdebstrap: $((t1-t0)) s"

R=rootfs
echo sprout-vm > $R/etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 sprout-vm\n' > $R/etc/hosts
echo '/dev/vda / ext4 rw,relatime 0 1' > $R/etc/fstab
chroot $R passwd -d root >/dev/null             # serial console only; sshd refuses empty passwords
mkdir -p $R/etc/systemd/network
printf '[Match]\nName=en* eth*\n[Network]\nDHCP=yes\n' > $R/etc/systemd/network/20-wired.network
chroot $R systemctl enable systemd-networkd.service ssh.service >/dev/null 2>&1 || true
# the VM has no internet and needs no resolver; docker/containerd start on demand by the suites
chroot $R systemctl disable docker.service docker.socket containerd.service >/dev/null 2>&1 || true
# /tmp on the root fs as on the CI host: Debian 13 mounts a tmpfs there with nosuid,nodev, and the
# suites keep their bundles under /tmp (setuid and device-node tests would fail for that alone)
chroot $R systemctl mask tmp.mount >/dev/null 2>&1 || true
chroot $R systemctl mask systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
  man-db.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true
printf 'UseDNS no\nPermitRootLogin prohibit-password\nMaxSessions 64\nMaxStartups 64\nAcceptEnv SPROUT_* RUST_*\n' \
  > $R/etc/ssh/sshd_config.d/sprout-vm.conf
install -d -m700 $R/root/.ssh
install -m600 id_ed25519.pub $R/root/.ssh/authorized_keys
chroot $R useradd -m -s /bin/bash tester
grep -q '^tester:' $R/etc/subuid || echo 'tester:100000:65536' >> $R/etc/subuid
grep -q '^tester:' $R/etc/subgid || echo 'tester:100000:65536' >> $R/etc/subgid
install -d -m700 -o 1000 -g 1000 $R/home/tester/.ssh
install -m600 -o 1000 -g 1000 id_ed25519.pub $R/home/tester/.ssh/authorized_keys
mkdir -p $R/var/lib/systemd/linger && touch $R/var/lib/systemd/linger/tester
echo 'tester ALL=(ALL) NOPASSWD: ALL' > $R/etc/sudoers.d/tester; chmod 440 $R/etc/sudoers.d/tester
# give user managers the cpu/memory/pids/io controllers (rootless podman resource limits)
mkdir -p $R/etc/systemd/system/user@.service.d
printf '[Service]\nDelegate=cpu cpuset io memory pids\n' > $R/etc/systemd/system/user@.service.d/delegate.conf
cp -L $R/vmlinuz vmlinuz 2>/dev/null || cp "$(ls $R/boot/vmlinuz-* | tail -1)" vmlinuz
cp -L $R/initrd.img initrd.img 2>/dev/null || cp "$(ls $R/boot/initrd.img-* | tail -1)" initrd.img
chmod 644 vmlinuz initrd.img
chroot $R dpkg-query -W -f '${Package} ${Version}\n' systemd linux-image-amd64 podman crun runc conmon \
  docker.io containerd passt slirp4netns python3 hyperfine 2>/dev/null > versions.txt || true
echo "$SUITE $MIRROR" > suite.txt
du -sh $R | awk '{print $1}' > rootfs.du
mkfs.ext4 -q -F -L vmroot -d $R rootfs.img "$SIZE"
rm -rf $R
t2=$(date +%s); log "mkfs: $((t2-t1)) s; build total: $((t2-t0)) s ($(cat rootfs.du) used)"
echo "$((t2-t0))" > build-seconds
touch complete
cd "$VMROOT"
mv "$WORK" "$IMG"
# keep only the newest image
for d in "$VMROOT"/img-*; do
  [ "$d" = "$IMG" ] && continue
  case "$d" in *.tmp) continue ;; esac
  log "removing old image $d"; rm -rf "$d"
done
echo "$IMG"
