"""``python -m fleetplan``: the ``fleetplan`` command, for an environment without its script on PATH."""

from fleetplan.main import run

if __name__ == "__main__":
    run()
