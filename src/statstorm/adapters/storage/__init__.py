"""Storage under the code: mounts and their cache options, GlusterFS volumes and profiles,
NFS mountstats, network round trips per window, tree copies and fsbench's timed passes."""
