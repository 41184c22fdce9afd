"""Structures the policies share (not policies): linked lists and rings (``dlist.pxd``), ghost
rings and slot FIFOs (``ghost.pxd``), ghosts with a value (``ghostval.pxd``)."""
