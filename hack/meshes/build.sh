#!/usr/bin/env bash
# Builds a mesh data plane (linkerd2-proxy or ztunnel) with cargo from its pinned commit and caches the stripped
# binary by commit: a warm machine rebuilds nothing. Sources come from the offline mirror
# ($IRS_THIRD_PARTY, default ../shared/third_party) when present, otherwise from a clone of the same commits.
#   hack/meshes/build.sh linkerd2-proxy|ztunnel   → prints the binary's path
set -euo pipefail
name=${1:?usage: build.sh linkerd2-proxy|ztunnel}
cache=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irs}/meshes
mirror=${IRS_THIRD_PARTY:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/third_party}

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

fetch() { # fetch DIR SNAPSHOT REPO COMMIT
	local dir=$1 snap=$mirror/$2.tar.gz
	[ -d "$dir" ] && return
	mkdir -p "$dir.tmp"
	if [ -f "$snap" ]; then
		tar -xzf "$snap" -C "$dir.tmp"
	else
		git clone -q "$3" "$dir.tmp" && git -C "$dir.tmp" checkout -q "$4"
	fi
	# A snapshot may hold one top folder: the tree is what is in it.
	if [ "$(ls -A "$dir.tmp" | wc -l)" = 1 ] && [ -d "$dir.tmp/$(ls -A "$dir.tmp")" ]; then
		mv "$dir.tmp/$(ls -A "$dir.tmp")" "$dir" && rmdir "$dir.tmp"
	else
		mv "$dir.tmp" "$dir"
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
# The toolchain the tree pins (rust-toolchain.toml), installed by rustup if it is missing.
if [ -f "$src/rust-toolchain.toml" ] || [ -f "$src/rust-toolchain" ]; then
	(cd "$src" && rustup toolchain install --profile minimal >&2)
fi
(cd "$src" && nice -n 10 "${build[@]}" -j "${CARGO_JOBS:-1}" >&2)
mkdir -p "$(dirname "$bin")"
strip -o "$bin.tmp" "$src/$out"
mv "$bin.tmp" "$bin"
echo "$bin"
