#!/usr/bin/env python3
"""A traced and simulated run directory against a whole ChampSim run with heartbeats: each
region's simulated CPI against its CPI in context, the estimate and the points in context
against the whole run. Usage: points-in-context.py RUN WHOLE_LOG (whole-run.sh's champsim.out)."""
import json, sys, re, bisect
d,log=sys.argv[1],sys.argv[2]
beats=[(0,0)]
for l in open(log):
    m=re.match(r'\s*Heartbeat CPU 0 instructions: (\d+) cycles: (\d+)',l)
    if m: beats.append((int(m.group(1)),int(m.group(2))))
    m=re.match(r'CPU 0 cumulative IPC: \S+ instructions: (\d+) cycles: (\d+)',l)
    if m: fin=(int(m.group(1)),int(m.group(2)))
beats.append(fin)
xs=[b[0] for b in beats]
def cyc(x):
    i=max(1,min(len(beats)-1,bisect.bisect_left(xs,x)))
    (x0,c0),(x1,c1)=beats[i-1],beats[i]
    return c0+(c1-c0)/max(1,x1-x0)*(x-x0)
su=json.load(open(d+'/summary.json')); s=json.load(open(d+'/simulation.json'))
sims={r['id']:r for r in s['regions']}
t=json.load(open(d+'/trace.json'))
num=den=numc=0
for p,tr in zip(su['points'],t['regions']):
    ctx=(cyc(p['start_position']+p['length'])-cyc(p['start_position']))/p['length']
    r=sims[tr['id']]; cpi=r['cycles']/r['instructions']; m=tr['multiplier']
    print(tr['id'], 'w %.4f'%tr['weight'], 'warm %d->%d'%(tr['warmup_instructions'],tr['warmup_records']), 'sim %.4f ctx %.4f (%+.1f%%)'%(cpi,ctx,100*(cpi/ctx-1)))
    num+=m*r['instructions']*cpi; den+=m*r['instructions']; numc+=m*r['instructions']*ctx
whole=fin[1]/fin[0]
print('whole %.4f est %.4f (%+.2f%%) in-context est %.4f (%+.2f%%)'%(whole,num/den,100*(num/den/whole-1),numc/den,100*(numc/den/whole-1)))
