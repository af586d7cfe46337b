#!/usr/bin/env bash
# Builds a mesh data plane (linkerd2-proxy or ztunnel) with cargo from its pinned commit and caches the stripped
# binary by commit: a warm machine rebuilds nothing. Sources come from the snapshots in the repository's
# third_party/ (or $IRS_THIRD_PARTY), so that a machine that reaches only the package registries builds them;
# a snapshot missing there is cloned from its repository at the same commit.
# It builds with the Rust toolchain this machine has (rustup's default, or $IRS_RUST_TOOLCHAIN), never one a tree
# pins: rustup's toolchain server is not a package registry and cannot be reached from every machine.
# Builds that share the cache (two checkouts, make test beside make testnode-up) take turns on a lock.
#   hack/meshes/build.sh linkerd2-proxy|ztunnel   → prints the binary's path
set -euo pipefail
name=${1:?usage: build.sh linkerd2-proxy|ztunnel}
cache=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irs}/meshes
mirror=${IRS_THIRD_PARTY:-$(cd "$(dirname "$0")/../.." && pwd)/third_party}

case $name in
linkerd2-proxy)
	repo=https://github.com/linkerd/linkerd2-proxy commit=29637b64f6cebedaf15bfbf516818d7a28a4d5a6
	dep_repo=https://github.com/linkerd/linkerd-kubert dep_commit=cb414ccc dep_snap=linkerd-kubert-cb414cc
	patch_url=https://github.com/linkerd/linkerd-kubert.git
	dep_crates="kubert-prometheus-process kubert-prometheus-tokio"
	build=(cargo build --release -p linkerd2-proxy --bin linkerd2-proxy)
	export RUSTFLAGS="--cfg tokio_unstable" # the repo's Dockerfile sets it; without it the build fails late
	out=target/release/linkerd2-proxy ;;
ztunnel)
	repo=https://github.com/istio/ztunnel commit=62d826530e5ce85764e309170205b293efcbc80b
	dep_repo=https://github.com/janrueth/boring-rustls-provider dep_commit=490340af dep_snap=boring-rustls-provider-490340a
	patch_url=https://github.com/janrueth/boring-rustls-provider
	dep_crates="boring-rustls-provider boring-additions boring-sys-additions"
	build=(cargo build --profile quick-release --features testing)
	out=out/rust/quick-release/ztunnel ;; # its .cargo/config.toml sets target-dir = out/rust
*) echo "build.sh: unknown data plane $name (linkerd2-proxy, ztunnel)" >&2; exit 2 ;;
esac

if [ "$name" = ztunnel ] && ! command -v protoc >/dev/null; then
	echo "installing protoc (ztunnel's build generates its protos)" >&2
	sudo_=$( [ "$(id -u)" = 0 ] || echo sudo ); $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq protobuf-compiler >&2
fi

short=${commit:0:7}
bin=$cache/$name-$short/$name
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
src=$cache/src/$name-$short dep=$cache/src/$dep_snap
mkdir -p "$cache/src"
# One build of a data plane at a time: the second waits, then finds the binary cached.
exec 9>"$cache/.lock-$name"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

fetch() { # fetch DIR SNAPSHOT REPO COMMIT
	local dir=$1 snap=$mirror/$2.tar.gz
	[ -d "$dir" ] && return
	local tmp
	tmp=$(mktemp -d "$dir.XXXXXX")
	if [ -f "$snap" ]; then
		tar -xzf "$snap" -C "$tmp"
	elif ! { git clone -q "$3" "$tmp" && git -C "$tmp" checkout -q "$4"; }; then
		rm -rf "$tmp"
		echo "build.sh: no snapshot $snap and no clone of $3 (GitHub is not a package registry: put the snapshot" \
			"in \$IRS_THIRD_PARTY)" >&2
		exit 1
	fi
	# A snapshot may hold one top folder: the tree is what is in it.
	if [ "$(ls -A "$tmp" | wc -l)" = 1 ] && [ -d "$tmp/$(ls -A "$tmp")" ]; then
		mv "$tmp/$(ls -A "$tmp")" "$dir" && rmdir "$tmp"
	else
		mv "$tmp" "$dir"
	fi
}
fetch "$src" "$name-$short" "$repo" "$commit"
fetch "$dep" "$dep_snap" "$dep_repo" "$dep_commit"

# Point the git dependency at the local tree (GitHub may be unreachable; crates.io is enough for the rest).
if ! grep -q "^\[patch.\"$patch_url\"\]" "$src/Cargo.toml"; then
	{
		echo
		echo "[patch.\"$patch_url\"]"
		for c in $dep_crates; do
			path=$(find "$dep" -name Cargo.toml -path "*/$c/Cargo.toml" | head -1)
			[ -n "$path" ] || path=$dep/Cargo.toml
			echo "$c = { path = \"$(dirname "$path")\" }"
		done
	} >>"$src/Cargo.toml"
fi
# The installed toolchain, named for rustup so that a tree's rust-toolchain.toml (linkerd2-proxy pins 1.90.0)
# does not make rustup download another: RUSTUP_TOOLCHAIN overrides the file.
if [ -z "${RUSTUP_TOOLCHAIN:-}" ]; then
	if [ -n "${IRS_RUST_TOOLCHAIN:-}" ]; then
		export RUSTUP_TOOLCHAIN=$IRS_RUST_TOOLCHAIN
	elif command -v rustup >/dev/null; then
		RUSTUP_TOOLCHAIN=$(rustup default | awk '{print $1; exit}')
		export RUSTUP_TOOLCHAIN
	fi
fi
# The binary is stripped, so the debug info linkerd2-proxy's release profile asks for (debug = 1) only costs
# compile and link time; the code is the same. Incremental compilation (ztunnel's quick-release) only pays for a
# rebuild, which a cache by commit never does.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_INCREMENTAL=0
command -v cargo >/dev/null || { echo "build.sh: cargo not found (install Rust: the data planes build from source)" >&2; exit 1; }
echo "building $name $short with $(cd "$src" && rustc --version) (cached in $(dirname "$bin"))" >&2
(cd "$src" && nice -n 10 "${build[@]}" -j "${CARGO_JOBS:-1}" >&2)
mkdir -p "$(dirname "$bin")"
tmp=$(mktemp "$bin.XXXXXX")
strip -o "$tmp" "$src/$out"
chmod 755 "$tmp"
mv "$tmp" "$bin"
echo "$bin"
