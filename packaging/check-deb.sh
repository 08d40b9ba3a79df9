#!/usr/bin/env bash
# check-deb.sh - build the Debian packages from a temporary copy of the tree, install them
# into a scratch root, check that every file they list is there and that downstream code
# builds and runs against them (examples/, through pkg-config and through meson), then
# remove and purge them and check that nothing is left behind.
#
#   packaging/check-deb.sh [--cuda] [--keep DIR]
#
# --cuda builds the CUDA kernels too; by default the packages are built with the nocuda
# profile to keep the check short: the regular build already compiles the kernels with
# nvcc, and the check runs where there is no GPU. --keep DIR copies the .deb files to DIR.
# Installs dpkg-dev, debhelper and the Build-Depends when missing (apt-get, as ./coll setup).
# The last line is "1 passed, 0 failed" or "0 passed, 1 failed", as tests/run.sh ends,
# so that .ci/run counts this check as one test.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
src=$PWD

profiles=nocuda
keep=""
while [ $# -gt 0 ]; do
    case $1 in
    --cuda) profiles="" ;;
    --keep) keep=$2; shift ;;
    *) echo "usage: packaging/check-deb.sh [--cuda] [--keep DIR]" >&2; exit 2 ;;
    esac
    shift
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "check-deb: [${SECONDS}s] $*"; }
fail() {
    echo "check-deb: FAILED: $*" >&2
    echo "0 passed, 1 failed"
    exit 1
}
apt_install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    step "installing $*"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# 1. Tools and build dependencies.
need=()
for p in dpkg-dev debhelper fakeroot; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}" || fail "cannot install ${need[*]}"
unmet=$(dpkg-checkbuilddeps "$src/debian/control" 2>&1 |
    sed -n 's/.*Unmet build dependencies: //p' | sed -E 's/\([^)]*\)//g')
if [ -n "$unmet" ]; then
    # Word splitting intended: a list of package names.
    # shellcheck disable=SC2086
    apt_install $unmet || fail "cannot install the build dependencies: $unmet"
fi

# 2. A copy of the tree as git sees it (tracked and new files, not ignored ones), so that
# build directories and the packaging's own debris never enter the package.
step "copying the tree to $work/coll-0.1.0"
mkdir -p "$work/coll-0.1.0"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$src" ls-files -z -co --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar -C "$src" --null -T - -cf - | tar -C "$work/coll-0.1.0" -xf - ||
        fail "cannot copy the tree"
else
    tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . |
        tar -C "$work/coll-0.1.0" -xf - || fail "cannot copy the tree"
fi

# 3. Build. parallel=2: this machine has two cores; noautodbgsym: no debug packages.
step "dpkg-buildpackage -us -uc -b${profiles:+ -P$profiles} (log: build.log)"
(cd "$work/coll-0.1.0" &&
    DEB_BUILD_OPTIONS="nocheck parallel=2 noautodbgsym" \
        dpkg-buildpackage -us -uc -b ${profiles:+-P$profiles}) >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    fail "dpkg-buildpackage"
}
debs=()
for p in libcoll0 libcoll-dev coll-tools; do
    f=$(ls "$work"/${p}_*.deb 2>/dev/null | head -n 1)
    [ -n "$f" ] || fail "no $p package was built"
    debs+=("$f")
    step "built $(basename "$f") ($(du -k "$f" | cut -f1) KiB)"
done
[ -z "$keep" ] || { mkdir -p "$keep" && cp "${debs[@]}" "$keep"/; }
# A program linked with NCCL must never come to depend on libcoll0 through the shim.
if dpkg-deb --ctrl-tarfile "${debs[0]}" | tar -xOf - ./shlibs 2>/dev/null | grep -q libnccl; then
    fail "libcoll0's shlibs names libnccl"
fi

# 4. Install into a scratch root with its own dpkg database. The packages' dependencies
# (libc6, ...) are on this machine, not in that database: --force-depends.
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" \
    "$root/var/lib/dpkg/triggers" "$root/var/log"
: >"$root/var/lib/dpkg/status"
: >"$root/var/lib/dpkg/available"
dpkg_root() { dpkg --root="$root" --force-depends --log=/dev/null "$@"; }
step "dpkg --root $root -i (libcoll0, libcoll-dev, coll-tools)"
dpkg_root -i "${debs[@]}" >"$work/dpkg.log" 2>&1 || {
    cat "$work/dpkg.log" >&2
    fail "dpkg -i"
}
for p in libcoll0 libcoll-dev coll-tools; do
    dpkg_root -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' ||
        fail "$p is not 'install ok installed'"
done
# Every file and link each package lists is in place.
for f in "${debs[@]}"; do
    dpkg-deb -c "$f" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./|/|' |
        while read -r path; do
            [ -e "$root$path" ] || [ -L "$root$path" ] || echo "$(basename "$f"): $path"
        done
done >"$work/missing"
[ ! -s "$work/missing" ] || { cat "$work/missing" >&2; fail "files missing after dpkg -i"; }

# 5. Use it as a downstream user would, through the scratch root only.
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=$root/usr/lib/$multiarch
export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
unset PKG_CONFIG_LIBDIR
export LD_LIBRARY_PATH=$lib COLL_TIMEOUT_MS=60000
run_ranks() { # run_ranks N WORD PROG: N ranks under the packaged collrun, each prints WORD ok
    local out
    out=$("$root/usr/bin/collrun" -n "$1" --timeout 60 "$3" 2>&1) || { echo "$out"; return 1; }
    echo "$out"
    [ "$(grep -c "$2 ok" <<<"$out")" -eq "$1" ]
}
step "examples/pkgconfig: make with pkg-config, 3 ranks under the packaged collrun"
cp -r "$src/examples/pkgconfig" "$work/ex-pc"
make -s -C "$work/ex-pc" CFLAGS="-O1 -Wall -Wextra -Werror" >"$work/ex.log" 2>&1 &&
    run_ranks 3 allreduce "$work/ex-pc/allreduce" >>"$work/ex.log" 2>&1 || {
    cat "$work/ex.log" >&2
    fail "examples/pkgconfig"
}
step "examples/meson: dependency('coll'), 3 ranks"
cp -r "$src/examples/meson" "$work/ex-meson-src"
{ meson setup "$work/ex-meson" "$work/ex-meson-src" && meson compile -C "$work/ex-meson" &&
    run_ranks 3 broadcast "$work/ex-meson/bcast"; } >"$work/ex.log" 2>&1 || {
    cat "$work/ex.log" >&2
    fail "examples/meson"
}
step "packaged all_reduce_perf checks an all-reduce on 2 ranks"
"$root/usr/bin/collrun" -n 2 --timeout 60 "$root/usr/bin/all_reduce_perf" -b 8 -e 4K -f 8 \
    -n 1 -w 1 -c 1 >"$work/ex.log" 2>&1 || { cat "$work/ex.log" >&2; fail "all_reduce_perf"; }
step "man pages: coll(3) and coll(7) are in the packages"
[ -e "$root/usr/share/man/man3/coll.3.gz" ] && [ -e "$root/usr/share/man/man7/coll.7.gz" ] ||
    fail "coll(3) or coll(7) is not packaged"

# 6. Remove, then purge: nothing of the packages may remain outside dpkg's own database.
step "dpkg --root $root -r, then -P"
dpkg_root -r coll-tools libcoll-dev libcoll0 >"$work/dpkg.log" 2>&1 &&
    dpkg_root -P coll-tools libcoll-dev libcoll0 >>"$work/dpkg.log" 2>&1 || {
    cat "$work/dpkg.log" >&2
    fail "dpkg -r / -P"
}
left=$(cd "$root" && find . -path ./var -prune -o \( -type f -o -type l \) -print)
[ -z "$left" ] || { echo "$left" >&2; fail "files left after removal"; }
for p in libcoll0 libcoll-dev coll-tools; do
    ! dpkg_root -s "$p" 2>/dev/null | grep -q '^Status: install' ||
        fail "$p is still known to dpkg after purge"
done

step "ok"
echo "1 passed, 0 failed"
