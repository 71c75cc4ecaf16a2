/*
 * Events of the fake driver.  An event stands for its most recent record:
 * a position in one stream's queue, reached when that stream's worker gets
 * there, and stamped with the real CLOCK_MONOTONIC time at that moment.
 * Waiting on an event is waiting on that position.  An event must never
 * report complete before the work ahead of its record has completed.
 */
#include <stdlib.h>

#include "driver.h"

void fg_event_unref(struct fg_event *ev)
{
    if (--ev->refs)
        return;
    if (ev->rec_stream)
        fg_stream_unref(ev->rec_stream);
    free(ev);
}

void fg_event_mark(struct fg_op *op, struct fg_stream *s, uint64_t seq)
{
    struct fg_event *ev = op->u.record.ev;

    s->refs++;
    if (ev->rec_stream)
        fg_stream_unref(ev->rec_stream);
    ev->rec_stream = s;
    ev->rec_seq = seq;
    ev->capture_id = 0;
    op->u.record.gen = ++ev->rec_gen;
}

static int event_complete(const struct fg_event *ev)
{
    return !ev->rec_stream || ev->rec_stream->done_seq >= ev->rec_seq;
}

/* Lock held. */
static CUresult event_get(CUevent h, struct fg_event **ev)
{
    CUresult rc = fg_check_init();

    if (rc)
        return rc;
    if (!fg_ptrset_has(&drv.events, h))
        return CUDA_ERROR_INVALID_HANDLE;
    *ev = (struct fg_event *)h;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    struct fg_event *ev;
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    /* An interprocess event must also disable timing, as in CUDA. */
    if (!rc && (!phEvent || (Flags & ~known) ||
                ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        ev = calloc(1, sizeof(*ev));
        if (!ev || fg_ptrset_add(&drv.events, ev)) {
            free(ev);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            ev->ctx_id = ctx->id;
            ev->flags = Flags;
            ev->refs = 1;
            *phEvent = (CUevent)ev;
        }
    }
    fg_unlock();
    return rc;
}

/* The handle dies at once; a pending record still completes, as in CUDA. */
CUresult cuEventDestroy_v2(CUevent hEvent)
{
    struct fg_event *ev;
    CUresult rc;

    fg_lock();
    rc = event_get(hEvent, &ev);
    if (!rc) {
        fg_ptrset_del(&drv.events, ev);
        fg_event_unref(ev);
    }
    fg_unlock();
    return rc;
}

/*
 * Captures the work enqueued on the stream so far.  On a capturing stream
 * nothing runs: the event marks a point of the capture that other streams
 * may join with cuStreamWaitEvent (an external record becomes a node of
 * the graph instead).  The stream must belong to the event's context
 * (CUDA_ERROR_INVALID_HANDLE otherwise, as cuda.h says); a wait on an
 * event may cross contexts.
 */
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    struct fg_event *ev;
    struct fg_stream *s;
    struct fg_op *op;
    CUresult rc;

    fg_lock();
    rc = event_get(hEvent, &ev);
    if (!rc)
        rc = fg_stream_get(hStream, &s);
    if (!rc && s->ctx->id != ev->ctx_id)
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc && (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && !(op = fg_op_new(FG_OP_RECORD, 0)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc)
        goto out;
    op->u.record.ev = ev;
    ev->refs++;
    if (s->capture && !(flags & CU_EVENT_RECORD_EXTERNAL)) {
        if (s->capture->invalidated)
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else
            ev->capture_id = s->capture->id;
        fg_op_free(op);
    } else {
        rc = fg_submit(s, op);
    }
out:
    fg_unlock();
    return rc;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return cuEventRecordWithFlags(hEvent, hStream, CU_EVENT_RECORD_DEFAULT);
}

CUresult cuEventQuery(CUevent hEvent)
{
    struct fg_event *ev;
    CUresult rc;

    fg_lock();
    rc = event_get(hEvent, &ev);
    if (!rc && ev->capture_id)
        rc = CUDA_ERROR_CAPTURED_EVENT;
    if (!rc)
        rc = fg_capture_forbid_unsafe();
    if (!rc && !event_complete(ev))
        rc = CUDA_ERROR_NOT_READY;
    fg_unlock();
    return rc;
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    struct fg_event *ev;
    CUresult rc;

    fg_lock();
    rc = event_get(hEvent, &ev);
    if (!rc && fg_in_worker())
        rc = CUDA_ERROR_NOT_PERMITTED;
    if (!rc && ev->capture_id)
        rc = CUDA_ERROR_CAPTURED_EVENT;
    if (!rc)
        rc = fg_capture_forbid_unsafe();
    if (!rc && ev->rec_stream) {
        fg_stream_wait_seq(ev->rec_stream, ev->rec_seq);
        fg_pool_trim_all();
    }
    fg_unlock();
    return rc;
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    struct fg_event *start, *end;
    CUresult rc;

    fg_lock();
    rc = event_get(hStart, &start);
    if (!rc)
        rc = event_get(hEnd, &end);
    if (!rc && !pMilliseconds)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && (start->capture_id || end->capture_id))
        rc = CUDA_ERROR_CAPTURED_EVENT;
    if (!rc && (!start->rec_stream || !end->rec_stream ||
                ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc && (!event_complete(start) || !event_complete(end)))
        rc = CUDA_ERROR_NOT_READY;
    if (!rc)
        *pMilliseconds = (float)(((double)end->time_ns - (double)start->time_ns) / 1e6);
    fg_unlock();
    return rc;
}

/*
 * Joins a capture when the event marks a point of an active one; otherwise
 * makes the stream's later work wait for the event's record as it stands
 * now.  A capture may not depend on work outside it (ISOLATION).
 */
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    struct fg_event *ev;
    struct fg_stream *s;
    struct fg_capture *cap;
    struct fg_op *op;
    CUresult rc;

    fg_lock();
    rc = event_get(hEvent, &ev);
    if (!rc)
        rc = fg_stream_get(hStream, &s);
    if (!rc && (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc)
        goto out;
    if (ev->capture_id) {
        cap = fg_capture_find(ev->capture_id);
        if (!cap)
            rc = CUDA_ERROR_CAPTURED_EVENT;
        else if (s->capture == cap)
            rc = cap->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
        else if (s->capture || s->kind == FG_STREAM_LEGACY) {
            fg_capture_invalidate(cap);
            if (s->capture)
                fg_capture_invalidate(s->capture);
            rc = s->capture ? CUDA_ERROR_STREAM_CAPTURE_ISOLATION : CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else
            s->capture = cap;
        goto out;
    }
    if (!ev->rec_stream)
        goto out; /* never recorded: nothing to wait for */
    if (s->capture) {
        fg_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        goto out;
    }
    if (ev->rec_stream == s || event_complete(ev))
        goto out; /* already ordered by the stream, or done */
    if (!(op = fg_op_new(FG_OP_WAIT, 0))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->u.wait.s = ev->rec_stream;
    op->u.wait.seq = ev->rec_seq;
    ev->rec_stream->refs++;
    rc = fg_submit(s, op);
out:
    fg_unlock();
    return rc;
}
