#!/usr/bin/env bash
# test_install.sh - coll as a downstream user sees it: `meson install` into a scratch root,
# then everything found through that root only: the files and SONAME, the installed programs,
# examples/pkgconfig built with pkg-config (shared and static), examples/meson built with
# dependency('coll'), all run under the installed collrun; and pkg-config's own error when
# it is pointed at the wrong prefix.
#
#   test_install.sh BUILDDIR SRCDIR CC PREFIX LIBDIR BINDIR INCLUDEDIR MANDIR DATADIR SANITIZE
set -uo pipefail

builddir=$1 srcdir=$2 cc=$3 prefix=$4 libdir=$5 bindir=$6 includedir=$7 mandir=$8
datadir=$9 sanitize=${10}

abs() { case $1 in /*) echo "$1" ;; *) echo "$prefix/$1" ;; esac; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root
lib=$root$(abs "$libdir") bin=$root$(abs "$bindir") inc=$root$(abs "$includedir")
man=$root$(abs "$mandir") data=$root$(abs "$datadir")

# An instrumented libcoll needs instrumented programs (the sanitizer runtime loads first).
san_flags=()
meson_san=()
if [ -n "$sanitize" ] && [ "$sanitize" != none ]; then
    san_flags=("-fsanitize=$sanitize")
    meson_san=("-Db_sanitize=$sanitize" -Db_lundef=false)
fi
# coll found through the scratch root only; what coll.pc requires (hwloc, ...) from the
# system, as on a user's machine.
export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
unset PKG_CONFIG_LIBDIR
export LD_LIBRARY_PATH=$lib
export COLL_TIMEOUT_MS=60000

n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1)) failed=$((failed + 1))
    echo "not ok $n - $1"
    [ -s "$scratch/log" ] && sed 's/^/# /' "$scratch/log"
}
check() { # check DESCRIPTION CMD...: output of CMD into the log, shown on failure
    local what=$1
    shift
    if "$@" >"$scratch/log" 2>&1; then ok "$what"; else not_ok "$what"; fi
}

echo "1..12"

check "meson install into a scratch root" \
    meson install -C "$builddir" --no-rebuild --destdir "$root"

missing=()
for f in "$inc/coll.h" "$lib/libcoll.so" "$lib/libcoll.so.0" "$lib/libcoll.a" \
    "$lib/pkgconfig/coll.pc" "$bin/collrun" "$bin/collbench" "$bin/collviz" "$bin/dptrain" \
    "$bin/all_reduce_perf" "$bin/sendrecv_perf" "$man/man1/collrun.1" "$man/man1/collbench.1" \
    "$man/man1/collviz.1" "$man/man1/dptrain.1" "$man/man1/all_reduce_perf.1" \
    "$man/man3/coll.3" "$man/man7/coll.7" "$data/coll/collbench_plot.py"; do
    [ -e "$f" ] || missing+=("${f#"$root"} is missing")
done
# The NCCL-compatible library, when built, stays out of the loader's default path.
for f in "$lib"/libnccl*; do
    [ -e "$f" ] && missing+=("${f#"$root"} is outside $libdir/coll")
done
if [ ${#missing[@]} -eq 0 ]; then
    ok "headers, libraries, coll.pc, programs and man pages are installed; no libnccl in libdir"
else
    printf '%s\n' "${missing[@]}" >"$scratch/log"
    not_ok "headers, libraries, coll.pc, programs and man pages are installed"
fi

soname=$(readelf -d "$lib/libcoll.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
link=$(readlink "$lib/libcoll.so.0")
if [ "$soname" = libcoll.so.0 ] && [ -f "$lib/$link" ]; then
    ok "SONAME is libcoll.so.0 and libcoll.so.0 links to the library ($link)"
else
    echo "SONAME '$soname', libcoll.so.0 -> '$link'" >"$scratch/log"
    not_ok "SONAME is libcoll.so.0 and libcoll.so.0 links to the library"
fi

check "installed collbench checks an all-reduce over 2 ranks (as all_reduce_perf)" \
    "$bin/collrun" -n 2 --timeout 60 "$bin/all_reduce_perf" -b 8 -e 4K -f 8 -n 1 -w 1 -c 1

check "pkg-config --cflags --libs coll points into the scratch root" \
    bash -c 'f=$(pkg-config --cflags --libs coll) && echo "$f" &&
             [[ $f == *"-I$1"* && $f == *"-L$2"* && $f == *-lcoll* ]]' _ "$inc" "$lib"

cp -r "$srcdir/examples/pkgconfig" "$scratch/ex-pc"
check "examples/pkgconfig builds with make and pkg-config only" \
    make -C "$scratch/ex-pc" CC="$cc" CFLAGS="-O1 -Wall -Wextra -Werror ${san_flags[*]}"

check "examples/pkgconfig runs on 3 ranks under the installed collrun" \
    bash -c 'out=$("$1" -n 3 --timeout 60 "$2") && echo "$out" &&
             [ "$(grep -c "allreduce ok" <<<"$out")" = 3 ]' _ "$bin/collrun" "$scratch/ex-pc/allreduce"

# Static: the same program with libcoll.a, and coll.pc's private libraries: its own
# Libs.private and its Requires.private as shared libraries (a fully static link would also
# need every static library those pull in, e.g. libudev for hwloc, which is the system's
# business, not coll's).
check "examples/pkgconfig links libcoll.a with coll.pc's private libraries and runs on 2 ranks" \
    bash -c 'pc=$(pkg-config --variable=pcfiledir coll)/coll.pc
             req=$(pkg-config --print-requires-private coll | awk "{print \$1}")
             libs="$(pkg-config --libs-only-L coll) -l:libcoll.a
                   $(sed -n "s/^Libs.private://p" "$pc") ${req:+$(pkg-config --libs $req)}" &&
             echo "$libs" &&
             "$1" -std=c11 $2 -I"$3" -o "$4/allreduce-static" "$5" $libs &&
             ! readelf -d "$4/allreduce-static" | grep -q "libcoll\.so" &&
             "$6" -n 2 --timeout 60 "$4/allreduce-static"' \
        _ "$cc" "${san_flags[*]}" "$inc" "$scratch" "$srcdir/examples/pkgconfig/allreduce.c" \
        "$bin/collrun"

cp -r "$srcdir/examples/meson" "$scratch/ex-meson-src"
check "examples/meson configures and builds with dependency('coll')" \
    bash -c 'CC="$1" meson setup "$2/ex-meson" "$2/ex-meson-src" "${@:3}" &&
             meson compile -C "$2/ex-meson"' _ "$cc" "$scratch" "${meson_san[@]}"

check "examples/meson runs on 3 ranks under the installed collrun" \
    bash -c 'out=$("$1" -n 3 --timeout 60 "$2") && echo "$out" &&
             [ "$(grep -c "broadcast ok" <<<"$out")" = 3 ]' _ "$bin/collrun" "$scratch/ex-meson/bcast"

# A wrong prefix: pkg-config's own error, non-zero status, nothing on stdout.
check "pkg-config --libs coll from a wrong prefix fails with pkg-config's error" \
    bash -c 'out=$(PKG_CONFIG_PATH="$1/nonexistent/lib/pkgconfig" pkg-config --libs coll 2>"$1/err")
             rc=$?; cat "$1/err"
             [ $rc -ne 0 ] && [ -z "$out" ] && grep -q "coll.*not found" "$1/err"' _ "$scratch"

# Rendered as a reader sees them (man-db, else groff; neither: skipped).
if command -v man >/dev/null; then
    render() { MANWIDTH=100 man -l "$1"; }
elif command -v groff >/dev/null; then
    render() { groff -man -Tutf8 "$1"; }
fi
if ! declare -F render >/dev/null; then
    n=$((n + 1))
    echo "ok $n - coll(3) and coll(7) render # SKIP neither man nor groff is installed"
else
    check "coll(3) and coll(7) render and name every exported function and COLL_TIMEOUT_MS" \
        bash -c "$(declare -f render)"'
                 render "$1/man3/coll.3" >"$2/c3" 2>/dev/null &&
                 render "$1/man7/coll.7" >"$2/c7" 2>/dev/null &&
                 grep -q COLL_TIMEOUT_MS "$2/c7" &&
                 for s in $(nm -D --defined-only "$3/libcoll.so" | awk "{print \$3}"); do
                     grep -q "$s" "$2/c3" || { echo "coll(3) lacks $s"; exit 1; }; done' \
            _ "$man" "$scratch" "$lib"
fi

[ "$failed" -eq 0 ]
