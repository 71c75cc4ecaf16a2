#!/usr/bin/env bats
# ckpt-resume through etcd while etcd has lost its quorum: no lease can be
# renewed and none expires, so no agent fences itself; the ranks train on,
# replication and restarts wait, and go on once etcd is back.  The cluster
# and the agents as in etcd.bats (etcd.bash).

load output
load etcd

bats_require_minimum_version 1.5.0

# bats test_tags=long
@test "two of three etcd members killed: the ranks train on, replication and restarts pause, said; the members restarted, replication goes on and the job ends as uninterrupted, with no restart" {
    # Long enough that the ranks still train when etcd is back: the pause
    # lasts until an agent has said so (up to 15 s: a request to the member
    # left waits for etcd's own timeout) and 7 s more; they run 400 to
    # 1,000 iterations a second, and 25,000 once ended within it.  On a
    # loaded machine the job takes minutes: the agents are given 10.
    ARGS="--iters 40000 --hidden 16 --layers 2 --batch 30"
    AGENT_TIMEOUT=600
    plain 3
    local t before during durable
    for t in a b c; do start $t 3; done
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    kill -KILL "$(cat "$D/etcd.pid.1")" "$(cat "$D/etcd.pid.2")"
    before=$(newest_iter)
    # An agent busy in a request to a dead member may find etcd back before it finds it lost: at least one says so.
    local killed=$SECONDS
    for _ in $(seq 200); do grep -q "etcd has lost its quorum" "$D"/err.* && break; sleep 0.1; done
    sleep $((killed + 7 - SECONDS > 0 ? killed + 7 - SECONDS : 0)) # over twice CKPT_NODE_TIMEOUT: a lease that could expire has
    during=$(newest_iter)
    [ "$during" -lt 36000 ] || { echo "the job was near its end ($during) before etcd came back: it cannot show replication going on"; return 1; }
    etcd_member 1
    etcd_member 2
    wait_rc a b c || { show; return 1; }
    local said=0
    for t in a b c; do
        [ "$(cat "$D/rc.$t")" = 0 ] && grep -q "^ckpt-resume: done exit=0 restarts=0$" "$D/err.$t" || { show; return 1; }
        grep -q "^ckpt-resume: warning: etcd has lost its quorum" "$D/err.$t" || continue
        said=$((said + 1))
        grep -q "^ckpt-resume: warning: etcd has lost its quorum (1 of 3 etcd members answer, and none has a leader): replication and restarts pause until it is back; the ranks train on$" "$D/err.$t" &&
            grep -q "^ckpt-resume: etcd has its quorum again after [0-9.]* s: the job's coordination goes on$" "$D/err.$t" ||
            { show; return 1; }
    done
    [ "$said" -ge 1 ] || { echo "no agent said etcd lost its quorum"; show; return 1; }
    ! grep -q "stops its ranks\|restarting\|was lost\|is lost (not\|lost the coordinator" "$D"/err.* || { show; return 1; }
    [ "$during" -gt "$before" ] || { echo "the ranks did not train while etcd had no quorum ($before, then $during)"; return 1; }
    # Replication went on once etcd was back: an iteration past the pause was made durable.
    durable=$(sed -n 's/^ckpt-resume: replication: .*newest durable iteration \([0-9]*\)$/\1/p' "$D"/err.* | sort -n | tail -n 1)
    [ -n "$durable" ] && [ "$durable" -gt "$during" ] || { echo "newest durable iteration ${durable:-none}, paused at $during"; show; return 1; }
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
}

# bats test_tags=long
@test "two of three etcd members killed and a rank killed meanwhile: its restart waits for etcd, said, and nothing restarts without it; the members restarted, the job restarts once and ends as uninterrupted" {
    ARGS="--iters 8000 --hidden 16 --layers 2 --batch 30"
    AGENT_TIMEOUT=300
    plain 3
    local t victim= lead leading
    for t in a b c; do start $t 3; done
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    leading=$(tag_of "$(etcdctl --endpoints "$ENDPOINTS" get "/ckpt/$CKPT_JOB/leader" --print-value-only)" "$CKPT_JOB") ||
        { show; return 1; }
    kill -KILL "$(cat "$D/etcd.pid.1")" "$(cat "$D/etcd.pid.2")"
    # A rank fails on a node whose agent knows etcd has no quorum (not the leader's: its agent has more
    # requests to etcd to wait out before it turns again).
    for _ in $(seq 200); do
        for t in a b c; do
            [ "$t" != "$leading" ] && grep -q "etcd has lost its quorum" "$D/err.$t" && { victim=$t; break 2; }
        done
        sleep 0.1
    done
    [ -n "$victim" ] || { show; return 1; }
    pkill -KILL -s "$(cat "$D/sid.$victim")" -x mlp-train
    # Said when its agent next turns: after the etcd requests it waits on have timed out (5 s each).
    for _ in $(seq 600); do grep -q "a rank of this node failed while etcd" "$D/err.$victim" && break; sleep 0.1; done
    grep -Eq "^ckpt-resume: warning: a rank of this node failed while etcd (has no quorum|does not answer): the job restarts once etcd is back \(the failure is told to the job.s leader then\)$" \
        "$D/err.$victim" || { show; return 1; }
    sleep 7 # over twice CKPT_NODE_TIMEOUT: long enough for a restart, or a node taken as lost, that did not wait
    ! grep -q "restarting from iteration\|stops its ranks\|is lost (\|lease ended" "$D"/err.* || { show; return 1; }
    etcd_member 1
    etcd_member 2
    wait_rc a b c || { show; return 1; }
    for t in a b c; do
        [ "$(cat "$D/rc.$t")" = 0 ] && grep -qE "^ckpt-resume: done exit=0 restarts=1( |$)" "$D/err.$t" || { show; return 1; }
    done
    # The leader restarted the job once etcd was back, from the snapshots the pause left intact.
    lead=$(grep -l "^ckpt-resume: restarting from iteration" "$D"/err.*) || { show; return 1; }
    sed -n '/etcd has its quorum again/,$p' $lead | grep -q "^ckpt-resume: restarting from iteration" || { show; return 1; }
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
}
