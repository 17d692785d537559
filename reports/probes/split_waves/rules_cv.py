# Forms of stage 12s rule compared on every non-held-out shape whose three candidates were timed at SPLIT_WAVES 4
# (the fit stream, reports/probes/split_waves and reports/probes/scalar_maps): the best STEPs of each form on all 45,
# then 5-fold cross-validation. The held-out scores are printed beside them (for the notes; nothing is chosen on them).
# Run from the repository root: python reports/probes/split_waves/rules_cv.py (tools/fit_rules.py --also --cv does the same for the dispatch sweeps)
import sys, itertools, math
sys.path.insert(0,'src'); sys.path.insert(0,'tools')
import pandas as pd
from dataclasses import replace
from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.geometry import evaluate, plan_names, unsupported_reason
from sgemm_lab.config.records import Shape
from sgemm_lab.dispatch import choice
from sgemm_lab.dispatch.autotune import eligible
cfg=cfgmod.load('config/config.yaml')
spec=choice.resolve(cfg, next(k for k in cfg.kernels if k.id=='12_dispatch'))
d=cfg.held_out_draw; fit_draw, score_draw = cfgmod.held_out_streams(d, cfg.suite, cfg.bench.shapes)
held={(s.m,s.n,s.k) for _,s in score_draw}
data={}
ok=eligible(pd.read_csv('reports/probes/split_waves/rules_fit/dispatch/12_dispatch.csv'))
for (m,n,k),g in ok.groupby(['m','n','k']): data[(m,n,k)]={int(r.candidate):float(r.median_ms) for r in g.itertuples()}
for f,names in [('reports/probes/split_waves/bench.csv',{'11_c0_w4':0,'11_c1_w4':1,'11_c2_w4':2}),('reports/probes/scalar_maps/bench.csv',{'11_c0':0,'11_c1':1,'11_c2':2})]:
    b=pd.read_csv(f); b=b[(b.status=='ok')&(b.verified==True)&b.kernel.isin(names)]
    for (m,n,k),g in b.groupby(['m','n','k']):
        if (m,n,k) in data: continue
        t={names[r.kernel]:float(r.median_ms) for r in g.itertuples()}
        if len(t)==3: data[(m,n,k)]=t
assert not (set(data)&held)
H=eligible(pd.read_csv('reports/h100/dispatch/12_dispatch.csv'))
hdata={}
for (m,n,k),g in H.groupby(['m','n','k']):
    if (m,n,k) in held: hdata[(m,n,k)]={int(r.candidate):float(r.median_ms) for r in g.itertuples()}
print(len(data),'fit shapes', len(hdata),'held-out')
def score(cost, steps, D):
    gaps=[]
    for sh,t in D.items():
        s=Shape(m=sh[0],n=sh[1],k=sh[2]); best=None
        for i in range(3):
            c=choice.listed_candidate(spec,i)
            if unsupported_reason(c,s) is not None or i not in t: continue
            v=evaluate(c,'rule.cost',cost,plan_names(c,s,steps[i]))
            if best is None or v<best[0]: best=(v,i)
        gaps.append(t[best[1]]/min(t.values()))
    return sum(g<=1.05 for g in gaps), max(gaps), math.exp(sum(map(math.log,gaps))/len(gaps))
forms={'A':"WAVES * (STEP * KSTEPS + 10 * BM * BN // THREADS)"}
for C in (0,5,20,40): forms[f'B{C}']=f"WAVES * (STEP * KSTEPS + {C} * BM * BN // THREADS)"
forms['F']="TILES * SPLIT * (STEP * KSTEPS + 10 * BM * BN // THREADS) // SLOTS + STEP * KSTEPS"
forms['G']="(WAVES * 3 + TILES * SPLIT // SLOTS) * (STEP * KSTEPS + 10 * BM * BN // THREADS)"
g1=range(36,110,2); g2=range(26,90,2)
for name,cost in forms.items():
    res=sorted(((score(cost,(48,a,b),data),(48,a,b)) for a in g1 for b in g2), key=lambda r:(-r[0][0],r[0][1],r[0][2]))
    best=res[0]
    print(name, cost, 'configured', score(cost,(48,72,51),data), 'best', best, 'held-out of best', score(cost,best[1],hdata), 'held-out configured', score(cost,(48,72,51),hdata))
print('--- 5-fold CV on the fit set')
import random
keys=sorted(data); random.Random(44).shuffle(keys); folds=[keys[i::5] for i in range(5)]
# precompute picks per (form, steps, shape) lazily via score on subsets
for name,cost in forms.items():
    w=0; worst=1; logs=0
    for f in folds:
        train={k:data[k] for k in keys if k not in f}; test={k:data[k] for k in f}
        best=min(((score(cost,(48,a,b),train),(48,a,b)) for a in g1[::2] for b in g2[::2]), key=lambda r:(-r[0][0],r[0][1],r[0][2]))
        s=score(cost,best[1],test); w+=s[0]; worst=max(worst,s[1]); logs+=math.log(s[2])*len(test)
    print(name, 'CV within', w, 'of', len(keys), 'worst', round(worst,3), 'geo', round(math.exp(logs/len(keys)),4))
