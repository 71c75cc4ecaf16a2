"""Put first on the ranks' PYTHONPATH by ckpt-resume: attaches libckpt's
PyTorch helper (libckpt_torch) once the program imports torch, and costs
nothing in a program that never does.  The program's own sitecustomize,
if it has one further down the path, still runs.
"""
import importlib.abc
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run_the_hidden_one():
    """The sitecustomize this one stands in front of, if any."""
    saved = sys.path[:]
    ours = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the rest of the path would, and attaches the helper
    once torch's module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                import libckpt_torch
                libckpt_torch.attach(module)
            except Exception as e:  # never the program's problem
                sys.stderr.write("libckpt: the PyTorch helper did not attach (%s); snapshots copy whole segments\n" % e)

        spec.loader.exec_module = exec_module
        return spec


if "torch" not in sys.modules:
    sys.meta_path.insert(0, _AfterTorch())
_run_the_hidden_one()
