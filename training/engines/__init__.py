"""Engines: how the scheduler (the server's part of a round) reaches the devices' part.

The scheduler (``privzv.training.scheduler``) is the server: it picks the active device and its
batch, asks the ledger, checks the uplink, records the release, runs ``method.server_reply``,
evaluates and checkpoints. An engine runs the device's part of a round on device m:

    engine.send(m, round, ids)   -> the uplink Message     (method.device_send on device m)
    engine.deliver(m, down)                                 (method.device_receive, end of the round)
    engine.abort(m)                                         (method.device_abort: a refused uplink)
    engine.embeddings(x_test, rows) -> [h_m(x_test[m][rows]) for every m]   (evaluation)

An engine whose devices can compute at once declares ``lookahead`` (rounds the scheduler may
start beyond the one it serves) and ``start(m, round, ids)``: the scheduler then starts the next
rounds of idle devices ahead (``Scheduler._start_ahead``) and still serves them in round order.

:class:`inprocess.InProcessEngine` calls the method on ``Device`` objects in this process (the
default); ``privzv.training.engines.flower`` moves the same calls over Flower messages to one
ClientApp per device. One Method interface, two engines.
"""
