package dp

import (
	"math/rand/v2"

	"github.com/autopar/autopar/mesh"
)

// splitmix is a stateless hash so that synthetic costs are a pure function of their key.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit hashes a stage key to [0, 1).
func unit(seed uint64, salt int, k, i int, s mesh.Submesh, l mesh.LogicalShape) float64 {
	h := seed
	for _, v := range []int{salt, k, i, s.Hosts, s.Devices, l[0], l[1]} {
		h = splitmix(h ^ uint64(v))
	}
	return float64(h>>11) / (1 << 53)
}

// plausible prices a stage like a real model: work split over the devices, a tensor-parallel
// all-reduce of activations that grows with MP, a data-parallel all-reduce of gradients that
// is slow when the submesh spans hosts (paid once per step, with the update), weights
// sharded over MP, activations over all devices. A few (stage, mesh) pairs have no sharding.
type plausible struct {
	seed              uint64
	work, par, act    []float64 // prefix sums per layer
	missing, overhead float64
}

func newPlausible(seed uint64, layers int) *plausible {
	rng := rand.New(rand.NewPCG(seed, 7))
	p := &plausible{seed: seed, missing: 0.05, overhead: 0.02}
	p.work, p.par, p.act = make([]float64, layers+1), make([]float64, layers+1), make([]float64, layers+1)
	for l := range layers {
		p.work[l+1] = p.work[l] + 1 + 9*rng.Float64()
		p.par[l+1] = p.par[l] + 1 + 4*rng.Float64()
		p.act[l+1] = p.act[l] + 1 + 2*rng.Float64()
	}
	return p
}

func (p *plausible) StageCost(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
	if unit(p.seed, 0, k, i, s, l) < p.missing {
		return StageCost{}, false
	}
	w, par, act := p.work[i]-p.work[k], p.par[i]-p.par[k], p.act[i]-p.act[k]
	n, dp, mp := float64(s.NumDevices()), float64(l[0]), float64(l[1])
	mpBeta, dpBeta := 0.4, 0.3
	if s.Hosts > 1 {
		dpBeta = 1.5 // axis 0 crosses hosts
	}
	t := w/n + 2*(mp-1)/mp*act/dp*mpBeta + p.overhead
	step := 2*(dp-1)/dp*par/mp*dpBeta + 0.1*par/n
	return StageCost{Time: t, Step: step, WeightBytes: 4 * par / mp, ActBytes: act / n}, true
}

// adversarial prices every (stage, mesh) independently at random: no structure for the
// recurrence to lean on, 15% without a sharding.
type adversarial struct{ seed uint64 }

func (a adversarial) StageCost(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
	if unit(a.seed, 0, k, i, s, l) < 0.15 {
		return StageCost{}, false
	}
	return StageCost{
		Time:        unit(a.seed, 1, k, i, s, l),
		Step:        2 * unit(a.seed, 4, k, i, s, l),
		WeightBytes: 10 * unit(a.seed, 2, k, i, s, l),
		ActBytes:    3 * unit(a.seed, 3, k, i, s, l),
	}, true
}

// oracleFunc adapts a function to Oracle.
type oracleFunc func(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool)

func (f oracleFunc) StageCost(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
	return f(k, i, s, l)
}

// receiving adds receives to an oracle: per (stage, submesh), random prices on a host's
// own link and across hosts (usually dearer, not always), a few far receives, none for a
// stage of every layer.
type receiving struct {
	Oracle
	seed   uint64
	layers int
}

func (r receiving) Receives(k, i int, s mesh.Submesh) Receives {
	if k == 0 && i == r.layers {
		return Receives{}
	}
	u := func(salt int) float64 { return unit(r.seed, 10+salt, k, i, s, mesh.LogicalShape{}) }
	x := Receives{Before: Link{Same: 0.3 * u(0), Cross: 2 * u(1)}, After: Link{Same: 0.3 * u(2), Cross: 2 * u(3)}}
	if u(4) < 0.2 {
		x.Far = 0.5 * u(5)
	}
	return x
}
