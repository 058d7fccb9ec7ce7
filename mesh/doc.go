// Package mesh describes the machines a plan runs on and what it costs to move
// bytes between them.
//
// It holds:
//
//   - Cluster: the hardware (hosts × devices per host, FLOP/s, memory,
//     bandwidths and latencies), read from strict JSON or from a named preset
//     (ParseCluster, LoadCluster).
//   - Submesh and LogicalMesh: the physical blocks of devices a pipeline stage
//     may run on (Alpa's (1, 2^k) and (n, M) shapes) and the 2-D logical view
//     (n0, n1) of one such block, with an alpha–beta cost per mesh axis.
//   - The per-op roofline (roofline.go): FLOP rates per op class and
//     precision, memory bandwidth, per-kernel overhead, and how devices that
//     share a host's cores slow each other (Cluster.OpTime, Cluster.Sharing).
//   - The collective table (table.go): ring algorithms inside a host,
//     hierarchical ones across hosts, all-to-all pair by pair, or a measured
//     fit (CollectiveFit); the bytes each device sends (BytesSent), which the
//     runtime's traffic counters must reproduce; and the flat alpha–beta model
//     of meshes made by hand.
//   - Spec: a sharding spec in Alpa's notation (R, S0, S1, S01 per tensor
//     dim, plus partial-sum axes), and ReshardCost, the cheapest sequence of
//     collectives that turns one spec into another.
//
// mesh knows devices, not graphs: it must not import ir or any other package
// of this module, so that the intra-operator pass, the stage DP, codegen and
// the runtime can all share one cost model without a dependency cycle.
//
// Units are SI throughout: seconds, bytes, bytes per second, FLOP per second.
// Errors are returned for anything a user can get wrong (a cluster spec, a
// sharding that does not divide a shape); broken invariants of the caller
// (an axis number other than 0 or 1) panic, and the doc comment says so.
package mesh
