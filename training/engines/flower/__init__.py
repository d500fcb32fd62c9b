"""The Flower engine: the server's part of each round in a Flower ServerApp, each device's part in
its own ClientApp (``apps``), the same ``Method`` calls carried by Flower messages (``codec``).
``launcher`` starts and stops a SuperLink, which runs the ServerApp (``serverlink``), and, per
device, a SuperNode that runs its ClientApp (``executor``) on this machine (or Flower's
simulation runtime) and submits the run. Needs the
optional package ``flwr`` (``pip install 'privzv[flower]'``; simulation: ``privzv[flower-sim]``).
"""
