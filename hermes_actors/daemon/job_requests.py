"""``hermesctl jobs`` while ``hermesd`` runs: the control socket's :class:`JobsRequest`, applied through the running
gateway's jobs port, so a job added, paused, resumed, run or deleted is armed (or disarmed) at once."""

from __future__ import annotations

from hermes_actors.daemon.control import JobsAction, JobsReply, JobsRequest
from hermes_actors.errors import HermesError
from hermes_actors.job_port import JobBook

__all__ = ["apply_jobs_request"]


def apply_jobs_request(book: JobBook, request: JobsRequest) -> JobsReply:
    """Apply ``request`` as the operator; :class:`~hermes_actors.job_port.JobError` says why nothing changed."""
    if request.action is JobsAction.LIST:
        return JobsReply(jobs=book.listed(limit=request.limit))
    if request.action is JobsAction.ADD:
        if request.spec is None:
            raise HermesError("a jobs add request carries the job's spec; are hermesctl and hermesd the same version?")
        return JobsReply(jobs=[book.add(request.spec, created_by="cli")])
    job_id = request.job_id
    if job_id is None:
        raise HermesError(f"a jobs {request.action} request names its job; are hermesctl and hermesd the same version?")
    match request.action:
        case JobsAction.SHOW:
            return JobsReply(jobs=[book.get(job_id)])
        case JobsAction.PAUSE:
            return JobsReply(jobs=[book.pause(job_id)])
        case JobsAction.RESUME:
            return JobsReply(jobs=[book.resume(job_id)])
        case JobsAction.RUN:
            return JobsReply(jobs=[book.run(job_id)])
        case JobsAction.DELETE:
            return JobsReply(jobs=[], deleted=book.delete(job_id))
    raise HermesError(f"unknown jobs action {request.action!r}")
