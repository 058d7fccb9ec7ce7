package dp

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/autopar/autopar/mesh"
	"github.com/stretchr/testify/require"
)

// randomConstraints pins one random aspect of the plan (or boundaries plus a per-stage
// pin), always consistently, so that Solve must honour it rather than reject it.
func randomConstraints(rng *rand.Rand, in *instance) Constraints {
	subs := Submeshes(in.c)
	randLogical := func() mesh.LogicalShape {
		ls := LogicalShapes(subs[rng.IntN(len(subs))])
		return ls[rng.IntN(len(ls))]
	}
	var k Constraints
	switch rng.IntN(5) {
	case 0:
		s := subs[rng.IntN(len(subs))]
		k.Submesh = &s
		return k
	case 1:
		l := randLogical()
		k.Logical = &l
		return k
	}
	k.Boundaries = []int{0}
	for b := 1; b < in.layers; b++ {
		if rng.IntN(2) == 0 && len(k.Boundaries) < in.c.Devices() {
			k.Boundaries = append(k.Boundaries, b)
		}
	}
	k.Boundaries = append(k.Boundaries, in.layers)
	stages := len(k.Boundaries) - 1
	if in.opts.MaxStages < stages {
		in.opts.MaxStages = 0
	}
	for range stages {
		switch rng.IntN(3) {
		case 1:
			k.StageSubmeshes = append(k.StageSubmeshes, subs[rng.IntN(len(subs))])
		case 2:
			k.StageLogicals = append(k.StageLogicals, randLogical())
		}
	}
	if len(k.StageSubmeshes) != stages {
		k.StageSubmeshes = nil
	}
	if len(k.StageLogicals) != stages {
		k.StageLogicals = nil
	}
	return k
}

// honours is the brute-force side of Constraints, written from their documentation.
func honours(k Constraints) func([]Stage) bool {
	return func(stages []Stage) bool {
		for j, st := range stages {
			switch {
			case k.Boundaries != nil && (len(k.Boundaries) != len(stages)+1 || k.Boundaries[j] != st.Start):
				return false
			case k.Submesh != nil && *k.Submesh != st.Submesh, k.Logical != nil && *k.Logical != st.Logical:
				return false
			case k.StageSubmeshes != nil && k.StageSubmeshes[j] != st.Submesh:
				return false
			case k.StageLogicals != nil && k.StageLogicals[j] != st.Logical:
				return false
			}
		}
		return true
	}
}

// TestConstraintsMatchBruteForce checks that pinned boundaries, submeshes and logical meshes
// give the optimum among the plans that honour them, as exhaustive search finds it.
func TestConstraintsMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for seed := range uint64(300) {
		in := randomInstance(rng, seed, seed%2 == 1)
		k := randomConstraints(rng, &in)
		in.opts.Constraints = k
		want := brute(in.layers, in.c, in.o, in.opts, honours(k))
		got, err := Solve(context.Background(), in.layers, in.c, in.o, in.opts)
		checkAgainstBrute(t, in, want, got, err)
		if err == nil {
			require.True(t, honours(k)(got.Stages), "%v %+v: %+v", in, k, got.Stages)
		}
	}
}

func TestPinnedBoundaries(t *testing.T) {
	c := Cluster{Hosts: 2, DevicesPerHost: 4, MemoryPerDevice: 1e9}
	o := newPlausible(1, 8)
	opts := Options{Microbatches: 8, Constraints: Constraints{Boundaries: []int{0, 3, 5, 8}}}
	r, err := Solve(context.Background(), 8, c, o, opts)
	require.NoError(t, err)
	var got []int
	for _, st := range r.Stages {
		got = append(got, st.Start)
	}
	require.Equal(t, []int{0, 3, 5}, got)

	l := mesh.LogicalShape{2, 2}
	opts.Constraints = Constraints{Boundaries: []int{0, 4, 8}, Logical: &l}
	r, err = Solve(context.Background(), 8, c, o, opts)
	require.NoError(t, err)
	for _, st := range r.Stages {
		require.Equal(t, l, st.Logical)
	}
	// Two stages of two devices cannot use all eight devices, nor can one stage of four.
	l = mesh.LogicalShape{1, 2}
	_, err = Solve(context.Background(), 8, c, o, opts)
	require.ErrorIs(t, err, ErrNoPlan)
	opts.Constraints = Constraints{Boundaries: []int{0, 8}, StageSubmeshes: []mesh.Submesh{{Hosts: 1, Devices: 4}}}
	_, err = Solve(context.Background(), 8, c, o, opts)
	require.ErrorIs(t, err, ErrNoPlan)
}

func TestBadConstraints(t *testing.T) {
	c := Cluster{Hosts: 1, DevicesPerHost: 4, MemoryPerDevice: 1e9}
	sub, bad := mesh.Submesh{Hosts: 1, Devices: 2}, mesh.Submesh{Hosts: 1, Devices: 3}
	l4 := mesh.LogicalShape{2, 2}
	cases := []struct {
		k    Constraints
		max  int
		want string
	}{
		{Constraints{Boundaries: []int{1, 6}}, 0, "must start at 0 and end at the layer count 6"},
		{Constraints{Boundaries: []int{0, 3}}, 0, "must start at 0 and end at the layer count 6"},
		{Constraints{Boundaries: []int{0, 3, 3, 6}}, 0, "not strictly increasing at index 2"},
		{Constraints{Boundaries: []int{0, 4, 2, 6}}, 0, "not strictly increasing"},
		{Constraints{Boundaries: []int{0, 7, 6}}, 0, "not strictly increasing"},
		{Constraints{Boundaries: []int{0, 2, 4, 6}}, 2, "make 3 stages, more than max stages 2"},
		{Constraints{Boundaries: []int{0, 1, 2, 3, 4, 6}}, 0, "make 5 stages but the cluster has 4 devices"},
		{Constraints{StageSubmeshes: []mesh.Submesh{sub}}, 0, "need stage boundaries"},
		{Constraints{Boundaries: []int{0, 6}, StageLogicals: []mesh.LogicalShape{l4, l4}}, 0, "2 stage logical meshes for 1 stages"},
		{Constraints{Submesh: &bad}, 0, "submesh 1x3 is not one of the cluster's shapes: 1x2^k dividing a host of 4 devices, or nx4 with n ≤ 1"},
		{Constraints{Submesh: &sub, Logical: &l4}, 0, "logical mesh 2x2 has 4 devices but submesh 1x2 has 2"},
		{Constraints{Logical: &mesh.LogicalShape{0, 4}}, 0, "must have positive axes"},
	}
	for _, tc := range cases {
		_, err := Solve(context.Background(), 6, c, newPlausible(1, 6), Options{Microbatches: 2, MaxStages: tc.max, Constraints: tc.k})
		require.ErrorContains(t, err, tc.want, "%+v", tc.k)
		require.True(t, strings.HasPrefix(err.Error(), "dp: "))
	}
}

// TestRingFallback: stages pinned to 2, 8, 4 and 2 devices on 2 hosts of 8 lie on no ring
// (from device 0 or 4 the 1x8 stage straddles the hosts), so Solve tiles them freely,
// receives priced by the cheaper link (Placed false), as brute force does.
func TestRingFallback(t *testing.T) {
	c := Cluster{Hosts: 2, DevicesPerHost: 8, MemoryPerDevice: 1e9}
	sub := func(d int) mesh.Submesh { return mesh.Submesh{Hosts: 1, Devices: d} }
	k := Constraints{Boundaries: []int{0, 1, 2, 3, 4}, StageSubmeshes: []mesh.Submesh{sub(2), sub(8), sub(4), sub(2)}}
	in := instance{layers: 4, c: c, o: receiving{newPlausible(3, 4), 3, 4}, opts: Options{Microbatches: 4, Constraints: k}}
	got, err := Solve(context.Background(), in.layers, c, in.o, in.opts)
	require.NoError(t, err)
	require.False(t, got.Placed)
	checkAgainstBrute(t, in, brute(in.layers, c, in.o, in.opts, honours(k)), got, err)
	// Unpinned, a plan on the ring wins.
	in.opts.Constraints = Constraints{}
	got, err = Solve(context.Background(), in.layers, c, in.o, in.opts)
	require.NoError(t, err)
	require.True(t, got.Placed)
	checkAgainstBrute(t, in, brute(in.layers, c, in.o, in.opts, nil), got, err)
}
