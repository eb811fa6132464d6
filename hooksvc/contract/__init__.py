"""The Cluster API Runtime SDK contract: the hook catalog, the wire format, the handlers.

The bottom of the house: models, the engine and the serving layer import it; it imports
nothing of hooksvc's own but itself.
"""
