"""`make demo`: the demo task types, the embedded fakeredis server and the runner."""
