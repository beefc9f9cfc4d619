#!/usr/bin/env bash
# Runs the original C pjdfstest suite (github.com/pjd/pjdfstest, tests/*.t under `prove -r`) in a
# fresh shrinkfs mount of an empty local-directory bucket, saves prove's output to OUT/prove.txt
# and prints the assertion totals and the failures per test file. Needs root (the suite switches
# users itself). Builds the suite first if SRC has no pjdfstest binary (autoreconf, configure, make).
# Usage: scripts/pjdfstest-c.sh [--allow-other] [--bin PATH] [--src DIR] [--out DIR] [-- MOUNT-ARGS...]
#   --allow-other  mount with --allow-other (without it, the suite's non-root steps get EACCES)
#   --bin PATH     shrinkfs binary (default: target/release/shrinkfs, else target/debug/shrinkfs)
#   --src DIR      pjdfstest source tree (default: ~/.cache/pjdfstest, cloned from GitHub if missing)
#   --out DIR      where prove.txt, summary.txt and the mount log go (default: a fresh temp dir)
#   MOUNT-ARGS     more `shrinkfs mount` flags, e.g. -- --metadata-ttl 0
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
allow_other=0 bin='' src='' out=''
mount_args=()
while (( $# )); do
    case $1 in
        --allow-other) allow_other=1 ;;
        --bin) bin=${2:?--bin needs a path}; shift ;;
        --src) src=${2:?--src needs a directory}; shift ;;
        --out) out=${2:?--out needs a directory}; shift ;;
        --) shift; mount_args=("$@"); break ;;
        -h|--help) sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "pjdfstest-c: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

[[ $(id -u) == 0 ]] || { echo "pjdfstest-c: the suite must run as root" >&2; exit 1; }

if [[ -z $bin ]]; then
    for b in "$repo/target/release/shrinkfs" "$repo/target/debug/shrinkfs"; do
        [[ -x $b ]] && { bin=$b; break; }
    done
fi
[[ -n $bin && -x $bin ]] || { echo "pjdfstest-c: no shrinkfs binary (build it or pass --bin)" >&2; exit 1; }
bin=$(realpath "$bin")

# Tools the suite and its build need (Debian package names).
need=()
for pair in prove:perl openssl:openssl fusermount3:fuse3 cc:gcc make:make; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
src=${src:-${XDG_CACHE_HOME:-$HOME/.cache}/pjdfstest}
if [[ ! -x $src/pjdfstest ]]; then
    for pair in autoreconf:autoconf automake:automake libtoolize:libtool; do
        command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
    done
    [[ -d $src/tests ]] || command -v git >/dev/null || need+=(git)
fi
if (( ${#need[@]} )); then
    echo "pjdfstest-c: installing ${need[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [[ ! -d $src/tests ]]; then
    mkdir -p "$(dirname "$src")"
    git clone --depth 1 https://github.com/pjd/pjdfstest "$src"
fi
src=$(realpath "$src")
if [[ ! -x $src/pjdfstest ]]; then
    echo "pjdfstest-c: building the suite in $src" >&2
    (cd "$src" && autoreconf -ifs && ./configure && make pjdfstest) >"$src/build.log" 2>&1 \
        || { tail -20 "$src/build.log" >&2; exit 1; }
fi

out=${out:-$(mktemp -d /tmp/pjdfstest-out.XXXXXX)}
mkdir -p "$out"; out=$(realpath "$out")

# Short paths (the suite's PATH_MAX tests add their own length to the bucket's), and 755 so the
# users the suite switches to can reach the mount point.
work=$(mktemp -d /tmp/pjd.XXXXXX)
chmod 755 "$work"
bucket=$work/b mnt=$work/m
mkdir -p "$bucket" "$mnt"
chmod 755 "$bucket" "$mnt"

pid=
cleanup() {
    cd /
    if mountpoint -q "$mnt"; then
        fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null || umount -l "$mnt" || true
    fi
    if [[ -n $pid ]]; then
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

flags=()
(( allow_other )) && flags+=(--allow-other)
SHRINKFS_CONFIG='' "$bin" mount "$bucket" "$mnt" "${flags[@]}" "${mount_args[@]}" \
    --log-file "$out/mount.log" &
pid=$!
for _ in $(seq 300); do
    mountpoint -q "$mnt" && break
    kill -0 "$pid" 2>/dev/null || { echo "pjdfstest-c: mount failed" >&2; tail -n 20 "$out/mount.log" 2>/dev/null | cut -c1-400 >&2; exit 1; }
    sleep 0.1
done
mountpoint -q "$mnt" || { echo "pjdfstest-c: $mnt not mounted after 30 s" >&2; exit 1; }

echo "pjdfstest-c: $(git -C "$src" rev-parse HEAD 2>/dev/null || echo "suite in $src"); shrinkfs $bin" \
    "mount ${flags[*]} ${mount_args[*]}; $(date -u +%FT%TZ)" | tee "$out/summary.txt"
cd "$mnt"
start=$(date +%s)
# -f shows the `not ok` lines (the command, expected and got) without the whole verbose log.
# prove exits non-zero when any test fails; that is the result being measured, not an error.
prove -r -f "$src/tests" >"$out/prove.txt" 2>&1 || true
secs=$(( $(date +%s) - start ))
cd /

# Per file: "PATH (Wstat: W Tests: RUN Failed: F)" in the summary report, and the per-file
# "Failed F/PLANNED subtests" line (PLANNED - RUN tests that never ran count as failed there).
perl -e '
    my ($src, $secs) = @ARGV; my (%failed, %planned, %run, %dubious, @order, $file, $bailed);
    my ($files, $tests) = (0, 0);
    while (<STDIN>) {
        if (m{^(\Q$src\E/tests/\S+\.t) \.+}) { $file = $1; }
        if (defined $file && /(?:^|\s)Failed (\d+)\/(\d+) subtests\s*$/) {
            push @order, $file unless exists $failed{$file};
            $failed{$file} = $1; $planned{$file} = $2;
        }
        if (m{^(\Q$src\E/tests/\S+\.t) +\(Wstat: (\d+)(?: \([^)]*\))? Tests: (\d+) Failed: (\d+)\)}) {
            push @order, $1 unless exists $failed{$1};
            $run{$1} = $3; $failed{$1} //= $4; $dubious{$1} = $2 if $2 != 0;
        }
        if (/^Files=(\d+), Tests=(\d+)/) { ($files, $tests) = ($1, $2); }
        $bailed = $file if /^FAILED--Further testing stopped/;
    }
    my ($nf, $missing) = (0, 0);
    for (@order) {
        $nf += $failed{$_};
        $missing += $planned{$_} - $run{$_} if defined $planned{$_} && defined $run{$_} && $planned{$_} > $run{$_};
    }
    my $total = $tests + $missing;
    printf "files: %d, assertions: %d (%d run, %d planned but not run), failed: %d, passed: %d, time: %ds\n",
        $files, $total, $tests, $missing, $nf, $total - $nf, $secs;
    $bailed =~ s{^\Q$src\E/tests/}{} if defined $bailed;
    print "  BAIL OUT in $bailed: prove stopped there, later files did not run\n" if defined $bailed;
    for (sort @order) {
        (my $f = $_) =~ s{^\Q$src\E/tests/}{};
        printf "  %s: %d failed of %d%s%s\n", $f, $failed{$_}, $planned{$_} // $run{$_} // 0,
            (defined $planned{$_} && defined $run{$_} && $planned{$_} > $run{$_})
                ? sprintf(" (%d not run)", $planned{$_} - $run{$_}) : "",
            $dubious{$_} ? " (wait status $dubious{$_})" : "";
    }
' "$src" "$secs" <"$out/prove.txt" | tee -a "$out/summary.txt"
echo "pjdfstest-c: full output in $out/prove.txt"
