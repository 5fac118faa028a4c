#!/bin/bash
# pivot-exec.sh ROOT CMD... : run CMD with ROOT as the root of a fresh private mount namespace
# (pivot_root instead of chroot), plus sysfs and a private devpts, like a real node.
#
# Why not chroot: the kernel refuses to create a user namespace for a chrooted process
# (create_user_ns() returns EPERM when current_chrooted()), and apptainer needs `/` to be a mount
# point (it makes `/` MS_SLAVE). After `mount --rbind ROOT ROOT` + pivot_root both hold.
# Every mount made here lives in the private namespace and vanishes with its last process.
# The pid that runs this script is the pid of CMD (everything execs), so a pid file stays right.
set -e
R=$1
shift
[[ -d "$R" && $# -ge 1 ]] || {
	echo "usage: pivot-exec.sh ROOT CMD [ARGS...]" >&2
	exit 2
}
# shellcheck disable=SC2016 # $R and $@ expand in the inner shell
exec unshare --mount --propagation private -- /bin/bash -c '
set -e
R=$1; shift
mount --rbind "$R" "$R"
mount -t sysfs sysfs "$R/sys"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
cd "$R"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
exec "$@"' pivot-exec "$R" "$@"
