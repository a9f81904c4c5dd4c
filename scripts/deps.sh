#!/bin/sh
# deps.sh: what make test needs besides Go, checked in a second and, where
# this machine can, installed from Debian's packages.
#
# make test-python and make test-python-install need a python3 that imports
# grpc and google.protobuf, and can make a venv and build a wheel
# (python3-grpcio, python3-protobuf, python3-venv, python3-wheel). With
# apt-get and root (or sudo without a password) they are installed, with
# python3-torch and python3-numpy where the archive has them (the sglang
# backend's tests on the CPU, which skip without torch, saying so).
# Otherwise this says what to install and fails, before any test runs.
# The python3s tried are $ATTNPLUG_DEPS_PYTHONS (default: python3 on PATH,
# then /usr/bin/python3, which make test-python also tries).
set -eu

need="python3 python3-grpcio python3-protobuf python3-venv python3-wheel"
optional="python3-torch python3-numpy"

ready() {
	for p in ${ATTNPLUG_DEPS_PYTHONS:-python3 /usr/bin/python3}; do
		command -v "$p" >/dev/null 2>&1 || continue
		"$p" -c 'import grpc, google.protobuf, ensurepip, wheel' >/dev/null 2>&1 && return 0
	done
	return 1
}

ready && exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
		sudo="sudo -n"
	else
		sudo="none"
	fi
fi
if command -v apt-get >/dev/null 2>&1 && [ "$sudo" != none ]; then
	echo "deps: installing Debian's $need (apt-get), and $optional where the archive has them" >&2
	$sudo apt-get update -qq >/dev/null 2>&1 || true
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
	for p in $optional; do
		if apt-cache show "$p" >/dev/null 2>&1; then
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$p" >/dev/null ||
				echo "deps: $p did not install; the tests that need it skip" >&2
		fi
	done
	ready && exit 0
fi
cat >&2 <<MSG
deps: make test needs a python3 that imports grpc and google.protobuf and can
make a venv and build a wheel. On Debian or Ubuntu, as root:
    apt-get install $need
(and $optional for the sglang backend's tests on the CPU), then make test
again. make test-go runs the Go tests alone.
MSG
exit 1
