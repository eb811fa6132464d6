"""The hook path: which templates a hook call starts, its runs found or created, the record
of the call. Called by the serving layer; it calls the engine only to wake it.
"""
