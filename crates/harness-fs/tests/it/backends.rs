//! Behaviour specific to one backend: overlay layering, composite routing, KV layout.
