#!/usr/bin/env bash
# ensure-deps.sh [--soft] COMMAND...
#
# Makes sure every named command is available. A missing one is installed from its Debian
# package with apt-get when running as root (apt-get update runs only when the package lists
# are missing or do not know the package). When not root, it stops and names the packages to
# install. With --soft, a command that cannot be installed is only a warning.
#
# Commands and the Debian packages that provide them:
#   redis-server, redis-cli   redis-server
#   postgres, initdb          postgresql   (found in /usr/lib/postgresql/*/bin, off PATH)
#   citus                     the Citus extension in that PostgreSQL: already installed, else
#                             from the build in EVENTQ_CITUS_DIR (default: shared/citus beside
#                             the clone, else /work/shared/citus; its install.sh), else from
#                             Citus's Debian package when the apt sources have one (Citus's
#                             own repository); name postgres before it
#   go                        not installed here: needs the Go toolchain named in go.mod
#   anything else             the package of the same name (curl, jq, gcc, make, ...)
set -euo pipefail

soft=0
if [[ ${1:-} == --soft ]]; then
	soft=1
	shift
fi

say() { printf 'ensure-deps: %s\n' "$*" >&2; }

# have CMD: is CMD usable?
have() {
	case $1 in
	postgres | initdb)
		command -v "$1" >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/$1" >/dev/null || return 1
		# As root the tests run Postgres as the postgres user, which the package creates.
		[[ $EUID -ne 0 ]] || getent passwd postgres >/dev/null
		;;
	citus) compgen -G "/usr/lib/postgresql/*/lib/citus.so" >/dev/null ;;
	*) command -v "$1" >/dev/null 2>&1 ;;
	esac
}

# citus_dir: where the Citus build and its install.sh are: EVENTQ_CITUS_DIR, else shared/citus
# beside the clone, else the one of this project's machines (/work/shared/citus).
citus_dir() {
	local beside
	beside=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/citus
	if [[ -n ${EVENTQ_CITUS_DIR:-} ]]; then
		echo "$EVENTQ_CITUS_DIR"
	elif [[ -f $beside/install.sh || ! -f /work/shared/citus/install.sh ]]; then
		echo "$beside"
	else
		echo /work/shared/citus
	fi
}

# citus_package: the newest Citus package for the installed PostgreSQL that the apt sources
# know (postgresql-15-citus-13.0 and the like, from Citus's own repository), or nothing.
citus_package() {
	local bin ver
	bin=$(compgen -G "/usr/lib/postgresql/*/bin/postgres" | sort -V | tail -n 1)
	[[ -n $bin ]] || return 0
	ver=$(basename "$(dirname "$(dirname "$bin")")")
	command -v apt-cache >/dev/null 2>&1 || return 0
	apt-cache pkgnames "postgresql-$ver-citus" 2>/dev/null | sort -V | tail -n 1
}

# package_for CMD: the Debian package that provides CMD, or nothing.
package_for() {
	case $1 in
	redis-server) echo redis-server ;;
	redis-cli) echo redis-tools ;;
	npx | npm) echo npm ;;
	chromium) echo chromium ;;
	postgres | initdb) echo postgresql ;;
	go | citus) ;;
	*) echo "$1" ;;
	esac
}

go_version() {
	local dir
	dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	sed -n 's/^go \([0-9.]*\).*/\1/p' "$dir/go.mod" 2>/dev/null | head -n1
}

# apt_install PKG...: install with apt-get, refreshing the package lists only when needed.
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	local refresh=0 pkg
	compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || refresh=1
	for pkg in "$@"; do
		[[ $(apt-cache policy "$pkg" 2>/dev/null) == *"Candidate: "[!\(]* ]] || refresh=1
	done
	if ((refresh)); then
		say "apt-get update"
		apt-get update -qq </dev/null
	fi
	say "apt-get install -y $*"
	if ! apt-get install -y -qq --no-install-recommends "$@" </dev/null; then
		# Stale lists point at files the mirror no longer has: refresh once and retry.
		((refresh)) && return 1
		apt-get update -qq </dev/null
		apt-get install -y -qq --no-install-recommends "$@" </dev/null
	fi
}

missing=() packages=() no_package=()
for cmd in "$@"; do
	have "$cmd" && continue
	missing+=("$cmd")
	pkg=$(package_for "$cmd")
	if [[ -z $pkg ]]; then
		no_package+=("$cmd")
	elif [[ " ${packages[*]} " != *" $pkg "* ]]; then
		packages+=("$pkg")
	fi
done

fail() {
	if ((soft)); then
		say "warning: $*"
		exit 0
	fi
	say "$*"
	exit 1
}

for cmd in "${no_package[@]}"; do
	if [[ $cmd == go ]]; then
		fail "the Go toolchain is not on PATH: install Go $(go_version) or newer (https://go.dev/dl/) and retry"
	fi
	if [[ $cmd == citus && ! -f $(citus_dir)/install.sh ]]; then
		# Last, Citus's own Debian packages, when the apt sources have them (Citus's repository).
		pkg=$(citus_package)
		if [[ -n $pkg && $EUID -eq 0 ]]; then
			say "installing Citus from the Debian package $pkg"
			apt_install "$pkg" || fail "apt-get install $pkg failed"
		elif [[ -n $pkg ]]; then
			fail "Citus is not installed: install the Debian package $pkg, e.g. sudo apt-get install $pkg"
		else
			fail "Citus is not installed: no build in EVENTQ_CITUS_DIR or $(citus_dir) (its install.sh), and no postgresql-<version>-citus package in the apt sources. Get it by adding Citus's apt repository (https://docs.citusdata.com/en/stable/installation/single_node_debian.html) or setting EVENTQ_CITUS_DIR to a Citus build"
		fi
	fi
done

# check_go_version: the go on PATH must build this module. From Go 1.21 on, an older go
# fetches the toolchain go.mod names by itself (GOTOOLCHAIN=auto, through the module proxy);
# an older one, or GOTOOLCHAIN=local, cannot.
check_go_version() {
	local want have
	want=$(go_version)
	have=$(go env GOVERSION 2>/dev/null | sed 's/^go//; s/[^0-9.].*//')
	[[ -n $want && -n $have ]] || return 0
	[[ $(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1) == "$want" ]] && return 0
	if [[ $(printf '1.21\n%s\n' "$have" | sort -V | head -n1) == 1.21 && $(go env GOTOOLCHAIN 2>/dev/null) != local* ]]; then
		say "Go $have is older than the $want this module needs: the go command downloads go$want from the module proxy on first use"
		return 0
	fi
	fail "Go $have is older than the $want this module needs: install Go $want or newer (https://go.dev/dl/), or set GOTOOLCHAIN=auto"
}
for arg in "$@"; do
	if [[ $arg == go ]] && have go; then
		check_go_version
	fi
done
((${#missing[@]})) || exit 0

if ((${#packages[@]})); then
	if [[ $EUID -ne 0 ]]; then
		fail "missing ${missing[*]}: install the Debian package(s) ${packages[*]}, e.g. sudo apt-get install ${packages[*]}"
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		fail "missing ${missing[*]} and apt-get is not available: install ${packages[*]} with your package manager"
	fi
	apt_install "${packages[@]}" || fail "apt-get install ${packages[*]} failed"
fi

if [[ " ${missing[*]} " == *" citus "* ]]; then
	say "installing Citus from $(citus_dir)"
	bash "$(citus_dir)/install.sh" || fail "$(citus_dir)/install.sh failed"
fi

for cmd in "${missing[@]}"; do
	have "$cmd" || fail "$cmd is still missing after installing ${packages[*]}"
done
