#!/usr/bin/env bash
# Entrypoint of the psyche client image (docs/docker.md).
#
# 1. Checks the configuration before starting anything: RPC, RUN_ID, a wallet, the parallelism and
#    batch numbers, the restart settings, and (PSYCHE_DEVICE=cuda, nvidia-smi present) the GPUs:
#    their count against DATA_PARALLELISM × TENSOR_PARALLELISM and the driver's CUDA major version
#    against the one the image's PyTorch is built for (PSYCHE_TORCH_CUDA, set by the Dockerfile).
#    Every problem gets one line; then exit 64 (EX_USAGE).
# 2. Runs the client (PSYCHE_CLIENT_CMD, default `psyche-solana-client train`, plus this script's
#    arguments) and restarts it after a crash, with a doubling backoff:
#      exit 0   the run finished            -> exit 0
#      exit 10  version differs from run's  -> exit 10, no restart (a newer image is needed)
#      exit 2   join rejected / bad config  -> exit 2, no restart (restarting cannot help)
#      exit 3   withdrawn by the coordinator -> restart (the next epoch may take it)
#      other    crash                       -> restart after PSYCHE_RESTART_BACKOFF_S (default 5),
#               doubling up to PSYCHE_RESTART_BACKOFF_MAX_S (300), at most PSYCHE_MAX_RESTARTS
#               times in a row (10; 0 = never), then exit with the client's code. A run longer
#               than PSYCHE_RESTART_RESET_S (600) resets the backoff and the restart count.
# 3. SIGTERM / SIGINT (docker stop, Ctrl-C) are forwarded to the client; the script exits once the
#    client has ended, with its code, and never restarts it.
#
# Values may carry one pair of surrounding quotes (docker run --env-file keeps them; the client
# removes them), so the checks remove them too. A flag given as an argument wins over its
# environment twin, as in the client. PSYCHE_SKIP_CHECKS=1 skips step 1.
set -euo pipefail

readonly EX_USAGE=64
readonly ARGS=("$@")

log() {
    local ts
    TZ=UTC printf -v ts '%(%Y-%m-%dT%H:%M:%SZ)T' -1
    printf '[psyche-entrypoint] %s %s\n' "$ts" "$*" >&2
}

# unquote VALUE: VALUE without one pair of matching surrounding quotes, into $REPLY.
unquote() {
    REPLY=$1
    if ((${#REPLY} >= 2)) && [[ ${REPLY:0:1} == "${REPLY: -1}" && ${REPLY:0:1} == [\"\'] ]]; then
        REPLY=${REPLY:1:${#REPLY}-2}
    fi
}

# setting VAR FLAG...: the value the client will use, into $REPLY: the last `FLAG value`,
# `--flag=value` or `-fvalue` among the arguments, else the environment variable VAR (unquoted),
# else empty.
setting() {
    local var=$1 flag i found=""
    shift
    REPLY=""
    for ((i = 0; i < ${#ARGS[@]}; i++)); do
        for flag; do
            if [[ ${ARGS[i]} == "$flag" ]]; then
                REPLY=${ARGS[i + 1]:-} found=1
            elif [[ $flag == --* && ${ARGS[i]} == "$flag"=* ]]; then
                REPLY=${ARGS[i]#*=} found=1
            elif [[ $flag != --* && ${ARGS[i]} == "$flag"?* ]]; then
                REPLY=${ARGS[i]#"$flag"} found=1
            fi
        done
    done
    [[ -n $found ]] || unquote "${!var:-}"
}

# has_arg FLAG...: one of the FLAGs is among the arguments (alone, --flag=value or -fvalue).
has_arg() {
    local a flag
    for a in "${ARGS[@]}"; do
        for flag; do
            if [[ $a == "$flag" || ($flag == --* && $a == "$flag"=*) ||
                ($flag != --* && $a == "$flag"?*) ]]; then
                return 0
            fi
        done
    done
    return 1
}

problems=0
problem() {
    log "error: $*"
    problems=$((problems + 1))
}

is_count() { [[ $1 =~ ^[0-9]{1,9}$ ]] && ((10#$1 >= 1)); }
is_number() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
calc() { LC_ALL=C awk "BEGIN { print ($1) }"; }

# seconds_setting VAR DEFAULT / count_setting VAR DEFAULT: the variable's value (DEFAULT when
# unset or empty) into $REPLY: a number of seconds ≥ 0 / a whole number ≥ 0.
seconds_setting() {
    unquote "${!1:-}"
    REPLY=${REPLY:-$2}
    if ! is_number "$REPLY"; then
        problem "$1=${!1:-} is not a number of seconds ≥ 0 (default $2)"
        REPLY=$2
    fi
}
count_setting() {
    unquote "${!1:-}"
    REPLY=${REPLY:-$2}
    if [[ $REPLY =~ ^[0-9]{1,9}$ ]]; then
        REPLY=$((10#$REPLY))
    else
        problem "$1=${!1:-} is not a whole number ≥ 0 (default $2)"
        REPLY=$2
    fi
}

# Signals: installed first, so that a docker stop during the checks is not lost (bash as PID 1
# ignores the signals it has no trap for).
child=""
sleeper=""
stop_signal=""
signals=0
on_signal() {
    stop_signal=$1
    signals=$((signals + 1))
    if [[ -n $child ]] && kill -0 "$child" 2>/dev/null; then
        log "SIG$1: forwarding it to the client (pid $child); it will not be restarted"
        kill -s "$1" "$child" 2>/dev/null || true
    fi
    if [[ -n $sleeper ]]; then
        kill "$sleeper" 2>/dev/null || true
    fi
}

client=()
read -r -a client <<<"${PSYCHE_CLIENT_CMD:-psyche-solana-client train}"
if ((${#client[@]} == 0)); then
    client=(psyche-solana-client train)
fi

# `docker run IMAGE --help`: the client's help, nothing else.
if has_arg --help; then
    exec "${client[@]}" "$@"
fi

count_setting PSYCHE_MAX_RESTARTS 10
max_restarts=$REPLY
seconds_setting PSYCHE_RESTART_BACKOFF_S 5
backoff_base=$REPLY
seconds_setting PSYCHE_RESTART_BACKOFF_MAX_S 300
backoff_max=$REPLY
seconds_setting PSYCHE_RESTART_RESET_S 600
reset_s=$REPLY

if ! command -v "${client[0]}" >/dev/null 2>&1; then
    problem "client command '${client[0]}' not found (PSYCHE_CLIENT_CMD='${PSYCHE_CLIENT_CMD:-}')"
fi

check_env() {
    setting RPC --rpc -r
    [[ -n $REPLY ]] || problem "RPC is not set: the Solana RPC URL or a cluster (devnet," \
        "mainnet-beta, testnet)"
    setting RUN_ID --run-id
    [[ -n $REPLY ]] || problem "RUN_ID is not set: the id of the run to join"

    unquote "${RAW_WALLET_PRIVATE_KEY:-}"
    local raw=$REPLY path
    setting WALLET_PRIVATE_KEY_PATH --wallet-private-key-path -w
    path=$REPLY
    # A key file given as a flag wins over RAW_WALLET_PRIVATE_KEY, as in the client; otherwise
    # RAW_WALLET_PRIVATE_KEY wins over WALLET_PRIVATE_KEY_PATH.
    if [[ -n $path ]] && { [[ -z $raw ]] || has_arg --wallet-private-key-path -w; }; then
        if [[ -f $path && -r $path ]]; then
            log "wallet: key file $path"
        else
            problem "WALLET_PRIVATE_KEY_PATH=$path is not a readable file (mount it:" \
                "-v /host/key.json:$path:ro)"
        fi
    elif [[ -n $raw ]]; then
        log "wallet: RAW_WALLET_PRIVATE_KEY"
    else
        problem "no wallet: set RAW_WALLET_PRIVATE_KEY (-e RAW_WALLET_PRIVATE_KEY=\"\$(cat" \
            "key.json)\") or WALLET_PRIVATE_KEY_PATH to a mounted keypair file"
    fi

    local flag var
    for var in DATA_PARALLELISM TENSOR_PARALLELISM MICRO_BATCH_SIZE; do
        flag=--${var,,}
        flag=${flag//_/-}
        setting "$var" "$flag"
        if [[ -n $REPLY ]] && ! is_count "$REPLY"; then
            problem "$var=$REPLY must be a whole number ≥ 1"
        fi
    done
}

check_gpus() {
    local device dp tp need smi="" driver="" driver_cuda="" gpus=0 visible line out
    setting PSYCHE_DEVICE --device
    device=$REPLY
    setting DATA_PARALLELISM --data-parallelism
    dp=$REPLY
    setting TENSOR_PARALLELISM --tensor-parallelism
    tp=$REPLY
    if ! is_count "${dp:-1}" || ! is_count "${tp:-1}"; then
        return 0 # reported by check_env
    fi
    need=$((10#${dp:-1} * 10#${tp:-1}))

    if command -v nvidia-smi >/dev/null 2>&1; then
        smi=1
        if ! out=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1); then
            if [[ $device == cuda* ]]; then
                problem "PSYCHE_DEVICE=$device but nvidia-smi fails: ${out%%$'\n'*}"
                return 0
            fi
            out=""
        fi
        driver=${out%%$'\n'*}
        while IFS= read -r line; do
            if [[ $line =~ ^GPU\ [0-9]+: ]]; then
                gpus=$((gpus + 1))
            fi
        done < <(nvidia-smi -L 2>/dev/null || true)
        out=$(nvidia-smi 2>/dev/null || true)
        if [[ $out =~ CUDA\ Version:\ *([0-9]+\.[0-9]+) ]]; then
            driver_cuda=${BASH_REMATCH[1]}
        fi
    fi

    visible=$gpus
    if [[ -v CUDA_VISIBLE_DEVICES ]]; then
        local ids n=0 id
        IFS=, read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"
        for id in "${ids[@]}"; do
            if [[ -n ${id// /} ]]; then
                n=$((n + 1))
            fi
        done
        if ((n < visible)); then
            visible=$n
        fi
    fi

    case $device in
        cuda | cuda:*) ;;
        *)
            if [[ ! -v PSYCHE_DEVICE ]] && ! has_arg --device; then
                log "device: auto (PSYCHE_DEVICE unset): the GPU when CUDA is usable, else the CPU"
            elif [[ -z $device ]]; then
                log "warning: PSYCHE_DEVICE is empty (an env file line 'PSYCHE_DEVICE=' blanks" \
                    "the image's cuda): the client picks 'auto', the CPU when CUDA is unusable"
            elif ((gpus > 0)); then
                log "warning: PSYCHE_DEVICE=$device although $gpus GPU(s) are visible; remove" \
                    "PSYCHE_DEVICE from the env file to train on the GPU (the image sets cuda)"
            else
                log "device: $device"
            fi
            return 0
            ;;
    esac

    if [[ -z $smi ]]; then
        log "warning: PSYCHE_DEVICE=$device but nvidia-smi is not in the container: GPUs and" \
            "driver not checked (start it with --gpus all and NVIDIA_DRIVER_CAPABILITIES=all)"
        return 0
    fi
    local torch_cuda=${PSYCHE_TORCH_CUDA:-}
    log "GPU: driver ${driver:-?} (CUDA ${driver_cuda:-?}), $gpus GPU(s) listed, $visible usable;" \
        "PyTorch built for CUDA ${torch_cuda:-?}; DATA_PARALLELISM × TENSOR_PARALLELISM = $need"
    if ((gpus == 0)); then
        problem "PSYCHE_DEVICE=$device but nvidia-smi lists no GPU (docker run --gpus all?)"
    elif ((need > visible)); then
        problem "DATA_PARALLELISM × TENSOR_PARALLELISM = $need needs $need GPUs; $visible" \
            "visible (docker run --gpus all, CUDA_VISIBLE_DEVICES)"
    fi
    if [[ $driver_cuda =~ ^([0-9]+)\.([0-9]+)$ ]]; then
        local have=$((10#${BASH_REMATCH[1]})) have_minor=$((10#${BASH_REMATCH[2]}))
        if [[ $torch_cuda =~ ^([0-9]+)\.([0-9]+) ]]; then
            local want=$((10#${BASH_REMATCH[1]})) want_minor=$((10#${BASH_REMATCH[2]}))
            if ((have < want)); then
                problem "driver $driver supports CUDA $driver_cuda; this image's PyTorch needs a" \
                    "CUDA $want driver (built for CUDA $torch_cuda): use an image built for CUDA" \
                    "$have (the default build) or update the driver (docs/docker.md)"
            elif ((have == want && have_minor < want_minor)); then
                log "note: driver CUDA $driver_cuda < $torch_cuda: running on CUDA minor-version" \
                    "compatibility"
            fi
        fi
    fi
}

trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

if [[ ${PSYCHE_SKIP_CHECKS:-} == 1 ]]; then
    log "PSYCHE_SKIP_CHECKS=1: configuration not checked"
else
    check_env
    check_gpus
fi
if ((problems > 0)); then
    log "$problems problem(s) in the configuration; not starting the client (exit $EX_USAGE)"
    exit "$EX_USAGE"
fi

# --- run, restart, forward signals ---------------------------------------------------------------

signal_exit_code() {
    case $1 in
        INT) echo 130 ;;
        *) echo 143 ;;
    esac
}

# A background job of a non-interactive shell starts with SIGINT ignored, and Python then keeps
# ignoring it: give the client back the default disposition so a forwarded SIGINT reaches it.
launcher=()
if env --default-signal=INT true 2>/dev/null; then
    launcher=(env --default-signal=INT)
fi

# A pipe nobody writes to, kept open read-write: `read -t` on it is a pause without a child
# process (a `sleep` child would be taken for the backoff's by anyone watching our children).
tick_dir=$(mktemp -d)
mkfifo "$tick_dir/tick"
exec {tick_fd}<>"$tick_dir/tick"
rm -rf "$tick_dir"

# wait_child: the client's exit status into $REPLY. It polls (every 0.1 s) instead of blocking
# in `wait`: a signal that lands as bash is about to block in `wait` can leave its trap pending
# until the client exits, i.e. forever for a client waiting to be told to stop (seen once under
# load with SIGINT). Between two polls the traps run at once.
wait_child() {
    while kill -0 "$child" 2>/dev/null; do
        read -r -t 0.1 -u "$tick_fd" _ || true
    done
    local rc=0 again seen=$signals
    wait "$child" || rc=$?
    while ((rc > 128)) && ((signals != seen)); do
        seen=$signals
        again=0
        wait "$child" || again=$?
        if ((again == 127)); then
            break # already collected: rc is the client's status
        fi
        rc=$again
    done
    REPLY=$rc
}

restarts=0
backoff=$backoff_base
while :; do
    if [[ -n $stop_signal ]]; then
        log "stopped by SIG$stop_signal before the client (re)started"
        exit "$(signal_exit_code "$stop_signal")"
    fi
    log "starting: ${client[*]}${*:+ $*}"
    started=${EPOCHREALTIME/[^0-9]/.}
    "${launcher[@]}" "${client[@]}" "$@" &
    child=$!
    if [[ -n $stop_signal ]]; then # the signal came before $child was known
        log "SIG$stop_signal: forwarding it to the client (pid $child); it will not be restarted"
        kill -s "$stop_signal" "$child" 2>/dev/null || true
    fi
    wait_child
    rc=$REPLY
    child=""
    elapsed=$(LC_ALL=C awk "BEGIN { printf \"%.2f\", ${EPOCHREALTIME/[^0-9]/.} - $started }")
    if [[ -n $stop_signal ]]; then
        log "client exited with code $rc after SIG$stop_signal; not restarting"
        exit "$rc"
    fi
    case $rc in
        0)
            log "client exited with code 0: the run is finished"
            exit 0
            ;;
        10)
            log "client exited with code 10: its version differs from the run's; a new image" \
                "is needed (pull or rebuild it); not restarting"
            exit 10
            ;;
        2)
            log "client exited with code 2: the join was rejected (authorization) or the" \
                "configuration is invalid (see its error above); restarting cannot help; not" \
                "restarting"
            exit 2
            ;;
    esac
    why="code $rc"
    if ((rc == 3)); then
        why="code 3 (withdrawn by the coordinator: halted, not selected or unhealthy;"
        why+=" a restart rejoins)"
    elif ((rc > 128)); then
        why="code $rc (killed by signal $((rc - 128)))"
    fi
    if [[ $(calc "$elapsed > $reset_s") == 1 ]]; then
        if ((restarts > 0)); then
            log "the client ran ${elapsed}s (> PSYCHE_RESTART_RESET_S=$reset_s):" \
                "backoff and restart count reset"
        fi
        restarts=0
        backoff=$backoff_base
    fi
    if ((restarts >= max_restarts)); then
        log "client exited with $why after ${elapsed}s; not restarting: $restarts restart(s)" \
            "done, PSYCHE_MAX_RESTARTS=$max_restarts"
        exit "$rc"
    fi
    restarts=$((restarts + 1))
    log "client exited with $why after ${elapsed}s; restart $restarts/$max_restarts in" \
        "${backoff}s"
    sleep "$backoff" &
    sleeper=$!
    wait "$sleeper" || true
    sleeper=""
    backoff=$(calc "($backoff * 2 > $backoff_max) ? $backoff_max : $backoff * 2")
done
