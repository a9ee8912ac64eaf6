#!/usr/bin/env bash
# A one-node Slurm cluster with accounting, from Debian 12 packages (Slurm 22.05), for
# tests/workflow/test_slurm.py; also usable by hand:
#
#   tests/workflow/slurm/cluster.sh start STATE_DIR   # then: export SLURM_CONF=STATE_DIR/slurm.conf
#   tests/workflow/slurm/cluster.sh stop STATE_DIR
#
# `start` installs the packages that are missing, writes slurm.conf, slurmdbd.conf and gres.conf
# into STATE_DIR from the templates beside this script and starts munged, mariadbd, slurmdbd,
# slurmctld and slurmd, each private to STATE_DIR (own munge key and socket, own database, own
# ports, logs under STATE_DIR/log); no system service is started. It also links
# /etc/slurm/slurm.conf to STATE_DIR/slurm.conf (see link_default_config). Accounting is on
# (slurmdbd backed by MariaDB) because the Snakemake executor learns that a job finished from
# sacct. Ports come from CTLD_PORT, SLURMD_PORT, DBD_PORT and DB_PORT (defaults 16817, 16818,
# 16819, 13306). STATE_DIR and every directory above it must be open to all (munged checks the
# path of its socket). `stop` ends the daemons it started, by their pid files, and removes the
# link.
#
# Exit status 77, with the reason on the last line of stderr, when this machine cannot run the
# cluster (not root, packages missing and not installable, a daemon that does not come up).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
CLUSTER=miaflow-test
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)

cannot() {
    echo "$*" >&2
    exit 77
}

# Print the end of a log and give up on this machine.
failed() {
    local what="$1" log="$2"
    [ -f "$log" ] && tail -n 20 "$log" >&2
    cannot "$what did not start (log: $log)"
}

wait_for() {
    local seconds="$1"
    shift
    for _ in $(seq "$((seconds * 5))"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}

install_packages() {
    local missing=()
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$package")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    command -v apt-get >/dev/null || cannot "packages ${missing[*]} are missing and there is no apt-get"
    local log="$STATE/log/apt.log"
    # Another apt run may hold dpkg's lock for a while: wait for it instead of failing.
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"; } >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        cannot "apt-get install ${missing[*]} failed (log: $log)"
    fi
}

# The executor's jobstep plugin runs each job under `srun` with the SLURM_* variables of the
# allocation removed, SLURM_CONF among them: that srun finds the config only at Slurm's default
# path. Link ours there, unless the machine has its own (left alone: the cluster is not started).
DEFAULT_CONF=/etc/slurm/slurm.conf

ours() {  # whether the default config path is a link made by this script
    [ -L "$DEFAULT_CONF" ] && head -n 1 "$DEFAULT_CONF" 2>/dev/null | cmp -s - <(head -n 1 "$HERE/slurm.conf.in")
}

link_default_config() {
    if [ -e "$DEFAULT_CONF" ] || [ -L "$DEFAULT_CONF" ]; then
        ours || cannot "$DEFAULT_CONF exists: this script does not replace a machine's Slurm configuration"
    fi
    mkdir -p "$(dirname "$DEFAULT_CONF")"
    ln -sfn "$STATE/slurm.conf" "$DEFAULT_CONF"
}

render() {
    local template="$1" target="$2"
    sed -e "s|@STATE@|$STATE|g" -e "s|@HOST@|$HOST|g" -e "s|@CLUSTER@|$CLUSTER|g" \
        -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" \
        -e "s|@DBD_PORT@|$DBD_PORT|g" -e "s|@DB_PORT@|$DB_PORT|g" \
        -e "s|@NODE_HARDWARE@|$NODE_HARDWARE|g" "$HERE/$template" >"$target"
}

start() {
    [ "$(id -u)" -eq 0 ] || cannot "starting Slurm's daemons needs root (uid is $(id -u))"
    mkdir -p "$STATE"/{log,munge,run,slurmctld,slurmd,mysql,gpu}
    install_packages
    HOST="$(hostname -s)"
    # The node's memory as slurmd detects it (a larger RealMemory drains the node), and at least
    # 4 CPUs, as a cluster node has (slurm.conf lets slurmd accept more than it finds): the report
    # group runs up to three of its jobs side by side and asks for a CPU each.
    local cpus
    cpus="$(nproc)"
    cpus=$((cpus > 4 ? cpus : 4))
    NODE_HARDWARE="$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //' \
        -e "s/CPUs=[0-9]*/CPUs=$cpus/" -e 's/SocketsPerBoard=[0-9]*/SocketsPerBoard=1/' \
        -e "s/CoresPerSocket=[0-9]*/CoresPerSocket=$cpus/" -e 's/ThreadsPerCore=[0-9]*/ThreadsPerCore=1/')"
    export SLURM_CONF="$STATE/slurm.conf"
    render slurm.conf.in "$STATE/slurm.conf"
    render gres.conf.in "$STATE/gres.conf"
    render slurmdbd.conf.in "$STATE/slurmdbd.conf"
    link_default_config
    chmod 600 "$STATE/slurmdbd.conf"  # slurmdbd refuses a config others can read
    touch "$STATE/gpu/nvidia0" "$STATE/gpu/nvidia1"

    [ -f "$STATE/munge/munge.key" ] || mungekey --create --keyfile="$STATE/munge/munge.key"
    chmod 700 "$STATE/munge"  # the key's directory; the socket's (run/) is open to all
    munged --key-file="$STATE/munge/munge.key" --socket="$STATE/run/munge.socket" \
        --pid-file="$STATE/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$STATE/munge/seed" </dev/null >>"$STATE/log/munged.log" 2>&1 ||
        failed munged "$STATE/log/munged.log"

    # A throwaway database server on 127.0.0.1 only; no grant tables, so slurmdbd needs no account.
    nohup mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --skip-grant-tables \
        --bind-address=127.0.0.1 --port="$DB_PORT" --socket="$STATE/mysql.sock" \
        --pid-file="$STATE/mariadbd.pid" --log-error="$STATE/log/mariadbd.log" \
        --innodb-buffer-pool-size=64M </dev/null >>"$STATE/log/mariadbd.log" 2>&1 &
    wait_for 60 mariadb-admin --no-defaults --socket="$STATE/mysql.sock" ping ||
        failed mariadbd "$STATE/log/mariadbd.log"

    slurmdbd </dev/null >>"$STATE/log/slurmdbd.log" 2>&1 || failed slurmdbd "$STATE/log/slurmdbd.log"
    wait_for 60 sacctmgr --noheader list cluster || failed slurmdbd "$STATE/log/slurmdbd.log"
    if ! sacctmgr --noheader --parsable2 list cluster format=cluster | grep -qx "$CLUSTER"; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
    fi

    slurmctld </dev/null >>"$STATE/log/slurmctld.log" 2>&1 || failed slurmctld "$STATE/log/slurmctld.log"
    wait_for 60 scontrol ping || failed slurmctld "$STATE/log/slurmctld.log"
    slurmd </dev/null >>"$STATE/log/slurmd.log" 2>&1 || failed slurmd "$STATE/log/slurmd.log"
    # A node that was down in an earlier run of this cluster comes back with ReturnToService=2.
    wait_for 60 bash -c "sinfo --noheader --format=%T | grep -qx idle" ||
        failed "slurmd (node state: $(sinfo --noheader --format=%T))" "$STATE/log/slurmd.log"
    echo "SLURM_CONF=$SLURM_CONF"
}

# All daemons are told to stop at once, then waited for: 3 s instead of 10 s one after the other
# (the cluster's state is thrown away, so none needs the others to shut down cleanly).
stop() {
    local daemon pid stopping=()
    for daemon in "${DAEMONS[@]}"; do
        [ -f "$STATE/$daemon.pid" ] || continue
        pid="$(cat "$STATE/$daemon.pid")"
        if kill "$pid" 2>/dev/null; then
            stopping+=("$daemon:$pid")
        fi
        rm -f "$STATE/$daemon.pid"
    done
    for daemon in "${stopping[@]}"; do
        pid="${daemon#*:}"
        wait_for 30 bash -c "! kill -0 $pid" || echo "${daemon%%:*} ($pid) did not stop" >&2
    done
    if [ "$(readlink "$DEFAULT_CONF" 2>/dev/null)" = "$STATE/slurm.conf" ]; then
        rm -f "$DEFAULT_CONF"
    fi
}

[ "$#" -eq 2 ] || { echo "usage: $0 start|stop STATE_DIR" >&2; exit 2; }
STATE="$(mkdir -p "$2" && cd "$2" && pwd)"
CTLD_PORT="${CTLD_PORT:-16817}"
SLURMD_PORT="${SLURMD_PORT:-16818}"
DBD_PORT="${DBD_PORT:-16819}"
DB_PORT="${DB_PORT:-13306}"
case "$1" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop STATE_DIR" >&2; exit 2 ;;
esac
