package sharding

// tie sets rep: each group shares the variables of its representative.
func (p *planner) tie() {
	p.rep = make([]int, len(p.groups))
	for i := range p.rep {
		p.rep[i] = i
	}
	if p.opts.SolveLayersOnce {
		p.tieLayers()
	}
}

func (p *planner) tieLayers() {}
