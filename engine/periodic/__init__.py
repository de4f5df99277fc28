"""Periodic tasks: schedules (one task per period) and the rq-scheduler loop."""
