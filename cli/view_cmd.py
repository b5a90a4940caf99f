"""``meganeura view MODEL.onnx``: open the model in Netron."""

from __future__ import annotations

import signal

import click


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--no-browser", is_flag=True, help="Do not open a browser; print the URL and serve until Ctrl-C.")
@click.option("--port", type=int, default=None, help="Port to serve on (default: Netron's choice).")
@click.option("--host", default="localhost", show_default=True)
def view(model: str, no_browser: bool, port: int | None, host: str) -> None:
    """Serve MODEL in Netron (com.meganeura nodes: right-click, "Show Function Definition")."""
    import netron

    # "Serve until Ctrl-C" must hold even when the parent started us with SIGINT ignored (a
    # background job of a non-interactive shell does that, and Python keeps an inherited SIG_IGN).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    address = (host, port) if port is not None else None
    url = netron.start(model, address=address, browse=not no_browser)
    # Everything after start() is inside the try: a Ctrl-C that lands before wait() is entered must
    # still stop Netron's server thread, else the process stays alive after the interrupt.
    try:
        where = f"http://{url[0]}:{url[1]}" if isinstance(url, tuple) else str(url)
        click.echo(f"Netron is serving {model} at {where} (Ctrl-C to stop)", nl=True)
        netron.wait()
    except KeyboardInterrupt:
        pass
    finally:
        netron.stop()
