// Package dp is autopar's inter-operator pass: Alpa's stage–submesh dynamic program
// (Zheng et al., OSDI'22, §5).
//
// Given a model already clustered into L layers and a cluster of Hosts × DevicesPerHost
// devices, dp slices the layers into contiguous pipeline stages, gives every stage a physical
// submesh and a logical mesh (dp, mp) on it, and minimises the predicted time of one training
// iteration with B micro-batches,
//
//	T = Σ_i t_i + (B−1)·max_j t_j,
//
// subject to every stage fitting in device memory under the chosen pipeline schedule.
//
// dp knows layer costs, not ops: every stage cost comes from an [Oracle] (the intra-operator
// sharding pass in production, synthetic tables in tests), so the package imports nothing
// else from autopar but mesh, whose types it speaks: a stage's submesh is a [mesh.Submesh]
// and its logical mesh a [mesh.LogicalShape] (n0, n1) = (dp, mp), both written "2x4". The
// cluster is [Cluster], the search's view of a mesh.Cluster ([ClusterOf]): its shape and a
// per-device memory budget. dp is checked against brute force on small instances.
//
// # Submeshes tile the cluster
//
// Stages run on submeshes of shape 1x2^k inside one host or nxM over n whole hosts,
// M = DevicesPerHost, which must be a power of two. The recurrence only asks that the stages'
// device counts sum to Hosts·M; Alpa's argument (§5.2) is that with these shapes such a
// multiset always tiles the cluster: sort the submeshes by size, largest first, and lay them
// out one after another over device IDs host·M+j. Every size is a power of two dividing M or
// a multiple of M, so each block starts at a multiple of its own size and a block smaller
// than a host never straddles two hosts. [Place] lays them out so (see PlaceBy); with a
// [Receiver] the search places them itself (below). [Result] carries the placement in
// Stage.Devices.
//
// # Bounded on any cluster
//
// Past [ExhaustiveHosts] hosts the search lists shapes, not one submesh per host count:
// whole-host submeshes of the sizes that split the cluster evenly into up to
// [BalancedStages] stages (on any cluster, a submesh of whole hosts takes tensor
// parallelism inside a host only, see [LogicalShapes]). The recurrence counts
// free devices in blocks (the gcd of the submesh sizes, a host or more there), so its size
// follows the host count, and a search past [MaxSearchStates] is refused by [Check] before
// any stage is priced.
//
// # Stages where they sit
//
// An oracle that also prices what a stage receives ([Receiver]) gets a search that knows
// where its stages sit: they lie on a ring of the device IDs in pipeline order, stage 0 at
// device 0 or at half a host, each on the devices after its predecessor's (wrapping past
// the last device to host 0's lower half), a stage smaller than a host inside one host,
// one of whole hosts from a host's first device. Where a stage sits follows from the
// devices its successors use, which the recurrence already counts, so the state does not
// grow: the recurrence runs once per rotation. A stage's receives from its ring
// neighbours (the stages holding the layers before and after it; the last stage is the
// first's) are priced at the host's own link where the neighbour shares its host, across
// hosts where not — as the plan's prediction prices the transfers, since the result's
// Stage.Devices are exactly that layout (Result.Placed). If no plan fits on the ring,
// Solve tiles freely ([Place]) and prices each receive by its cheaper link.
//
// # What dp does not model
//
// Without a Receiver, point-to-point traffic between stages is not charged (as in Alpa's DP;
// it is small next to intra-stage collectives for layer boundaries chosen with few crossing
// bytes). The oracle is called once per (layer range, submesh, logical mesh) from one
// goroutine, in a fixed order.
package dp
