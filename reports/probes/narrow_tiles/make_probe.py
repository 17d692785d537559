import sys, yaml
sys.path.insert(0, 'src')
from sgemm_lab.config import load as cfgmod
from dataclasses import replace
raw = yaml.safe_load(open('config/config.yaml'))
ks = {k['id']: k for k in raw['kernels']}
g11 = dict(ks['11_general']); d12 = dict(ks['12_dispatch'])
new = {
  'n32': {'BM': 128, 'BN': 32, 'WM': 64, 'WN': 32, 'WNITER': 2, 'TM': 8, 'TN': 4, 'THREADS': 64, 'MINBLOCKS': 4, 'SPLIT_SLOTS': 528},
  'n48': {'BM': 192, 'BN': 48, 'WM': 64, 'WN': 48, 'WNITER': 3, 'TM': 8, 'TN': 4, 'THREADS': 96, 'MINBLOCKS': 2, 'SPLIT_SLOTS': 264},
  'm32': {'BM': 32, 'BN': 128, 'WM': 32, 'WN': 64, 'WNITER': 2, 'TM': 4, 'TN': 4, 'THREADS': 64, 'MINBLOCKS': 4, 'SPLIT_SLOTS': 528},
  'm48': {'BM': 48, 'BN': 192, 'WM': 48, 'WN': 64, 'WNITER': 2, 'TM': 4, 'TN': 4, 'THREADS': 96, 'MINBLOCKS': 2, 'SPLIT_SLOTS': 264},
}
kernels = [g11]
for name, p in new.items():
    k = dict(g11); k['id'] = f'11_{name}'; k['title'] = f"stage 11 with {p['BM']}x{p['BN']} tiles"
    k['params'] = {**g11['params'], **p}; k['suite'] = False; k.pop('explain', None)
    kernels.append(k)
d12['candidates'] = list(d12['candidates']) + list(new.values())
d12['rule'] = dict(d12['rule']); d12['rule']['step'] = list(d12['rule']['step']) + [60, 80, 60, 80]
kernels.append(d12)
def draw(seed, stream):
    c = cfgmod.load('config/config.yaml')
    d = replace(c.held_out_draw, seed=seed)
    fit, score = cfgmod.held_out_streams(d, c.suite, c.bench.shapes)
    return [[s.m, s.n, s.k] for _, s in (fit if stream == 'fit' else score)]
shapes = draw(44, 'fit') + draw(44, 'score') + draw(45, 'fit')
probe = {
  'run': 'probe-narrow-tiles',
  'check': {'shapes': [[128, 128, 128], [5, 9, 13], [3, 7, 2], [65, 5, 5], [129, 258, 35], [257, 131, 67],
                       [1297, 1299, 1301], [131, 67, 2053], [37, 45, 70001], [33, 301, 1027], [301, 47, 1029],
                       [255, 1, 1025], [2, 1001, 9], [49, 193, 77], [200, 64, 66], [61, 2001, 403]]},
  'bench': {'square': [4096], 'shapes': []},
  'suite': {'held_out': {'seed': 44, 'per_class': 0}, 'shapes': shapes},
  'baseline': {'numpy': False, 'cublas': True, 'cublas_tf32': False},
  'profile': {'enabled': False}, 'sanitize': True, 'failure_tests': False,
  'kernels': kernels,
}
head = """# Probe: narrow tiles for stage 11/12 (kernels/NOTES.md, "Narrow tiles for outputs 17-64 wide"): 128x32,
# 192x48, 32x128 and 48x192 tiles of stage 11 (config only, no source change), each checked on its own
# on odd shapes, and all seven candidates of stage 12 timed by its shape sweep on seed 44's fit and score
# streams and seed 45's fit stream (72 shapes). Written by make_probe.py beside this file; run with
#   PY=... bash tools/probe.sh reports/probes/narrow_tiles/probe.yaml
"""
open('reports/probes/narrow_tiles/probe.yaml', 'w').write(head + yaml.safe_dump(probe, sort_keys=False, width=120))
