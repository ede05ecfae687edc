"""torch.distributed's TCPStore without libuv, for Debian's python3-torch (built without libuv support).

torch 2.6 creates every TCPStore with use_libuv=True unless the caller says otherwise, and a build without
libuv refuses that ("use_libuv was requested but PyTorch was build without libuv support"): torchrun's
rendezvous and each rank's init_process_group fail before training starts. When torch.distributed is first
imported, this replaces its TCPStore, there and in every torch.distributed module that already holds the
name, by a subclass that always asks for the store without libuv. gpufleet-tcpstore.pth loads it at
interpreter start; until torch.distributed is imported it only sits on sys.meta_path.
"""
import importlib.abc
import importlib.machinery
import sys

TARGET = "torch.distributed"
USE_LIBUV_POSITION = 8  # TCPStore(host_name, port, world_size, is_master, timeout, wait_for_workers,
#                          multi_tenant, master_listen_fd, use_libuv)


def patch(module):
    original = getattr(module, "TCPStore", None)
    if original is None:
        return

    class TCPStore(original):
        __doc__ = original.__doc__

        def __init__(self, *args, **kwargs):
            kwargs["use_libuv"] = False
            super().__init__(*args[:USE_LIBUV_POSITION], **kwargs)

    TCPStore.__module__ = original.__module__
    TCPStore.__qualname__ = original.__qualname__
    for name, loaded in list(sys.modules.items()):
        if (name == TARGET or name.startswith(TARGET + ".")) and getattr(loaded, "TCPStore", None) is original:
            loaded.TCPStore = TCPStore


class PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        patch(module)


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = PatchingLoader(spec.loader)
        return spec


if not any(isinstance(finder, Finder) for finder in sys.meta_path):
    sys.meta_path.insert(0, Finder())
