"""The split-K tree of kernels/17_wgmma_tf32.cu in float32: the binary tree (SPLIT_FANIN = 2) against nodes of
F = 4 and 8 children whose last child to arrive (drawn at random) adds the others in the binary tree's pairs.
Prints how many of the cases differ in any bit (0 expected). Run: python reports/probes/tree_fanin/tree_model.py
"""
import numpy as np, random
f32=np.float32
def binary(vals):
    S=len(vals); cur={i:vals[i] for i in range(S)}; span=1
    while span < S:
        nxt={}
        for lo,v in cur.items():
            parent = lo & ~(2*span-1); sib = parent+span
            if lo != parent: continue
            nxt[parent] = f32(v + cur[sib]) if sib < S else v
        cur=nxt; span*=2
    return cur[0]
def span_sum(ch, j, W, kids):
    if W==1: return ch[j]
    a=span_sum(ch,j,W//2,kids)
    if j+W//2 < kids: a=f32(a+span_sum(ch,j+W//2,W//2,kids))
    return a
def fused(vals,F,rng):
    S=len(vals); cur={i:vals[i] for i in range(S)}; span=1
    while span < S:
        nxt={}
        parents=sorted(set(lo - lo%(F*span) for lo in cur))
        for parent in parents:
            kids=min(F,(S-parent+span-1)//span)
            ch=[cur[parent+j*span] for j in range(kids)]
            if kids==1: nxt[parent]=ch[0]; continue
            me=rng.randrange(kids)
            v=ch[me]
            w=1
            while w < F:
                j=(me^w)&~(w-1)
                if j < kids: v=f32(v+span_sum(ch,j,w,kids))
                w*=2
            nxt[parent]=v
        cur=nxt; span*=F
    return cur[0]
rng=random.Random(1); bad=0; n=0
for S in range(2,129):
    for F in (2,4,8):
        for t in range(20):
            vals=[f32(x) for x in np.random.default_rng(S*100+t).standard_normal(S).astype(np.float32)*np.float32(10.0)**np.random.default_rng(t).integers(-3,4,S)]
            b=binary(vals); f=fused(vals,F,rng); n+=1
            if b.tobytes()!=f.tobytes(): bad+=1
print('cases',n,'mismatches',bad)
