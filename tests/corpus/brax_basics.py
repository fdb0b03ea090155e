# ruff: noqa
# mypy: ignore-errors
# From https://github.com/google/brax/blob/0b96d056328d15ea7ebfd3ce07f42be72ec76e40/notebooks/basics.ipynb
# (Apache-2.0, the repository's LICENSE; the notebook carries no license header of its own): its
# code cells, concatenated in order and unchanged, each under a "# %% [code cell N]" line naming
# its cell; the markdown cells are left out, and so is cell 1's `!pip install ...` line (IPython,
# not Python; it runs only where brax is missing). Shrunk: nothing.

# %% [code cell 1]
#@title Colab setup and imports

import jax
from jax import numpy as jp
from matplotlib.lines import Line2D
from matplotlib.patches import Circle
import matplotlib.pyplot as plt

try:
  import brax
except (ImportError, ModuleNotFoundError):
  from IPython.display import clear_output 
  clear_output()
  import brax
# %% [code cell 3]
from brax.io import mjcf

ball = mjcf.loads(
    """<mujoco>
         <option timestep="0.005"/>
         <worldbody>
           <body pos="0 0 3">
             <joint type="free"/>
             <geom size="0.5" type="sphere"/>
           </body>
           <geom size="40 40 40" type="plane"/>
         </worldbody>
       </mujoco>
  """)
# %% [code cell 5]
print(ball.link.inertia.mass, 4/3 * jp.pi * 0.5**3 * 1000)
# %% [code cell 7]
def visualize(ax, pos, alpha=1):
  for p, pn in zip(pos, list(pos[1:]) + [None]):
    ax.add_patch(Circle(xy=(p[0], p[2]), radius=0.5, fill=False, color=(0, 0, 0, alpha)))
    if pn is not None:
      ax.add_line(Line2D([p[0], pn[0]], [p[2], pn[2]], color=(1, 0, 0, alpha)))

_, ax = plt.subplots()
plt.xlim([-3, 3])
plt.ylim([0, 4])

visualize(ax, [[0, 0, 0.5]])
plt.title('ball at rest')
plt.show()
# %% [code cell 9]
#@title { run: "auto"}
from brax.positional import pipeline

elasticity = 0.85 #@param { type:"slider", min: 0.5, max: 1.0, step:0.05 }
ball_velocity = 1 #@param { type:"slider", min:-5, max:5, step: 0.5 }

# change the material elasticity of the ball and the plane
ball = ball.replace(elasticity=jp.array([elasticity] * ball.ngeom))

# provide an initial velocity to the ball
qd = jp.array([ball_velocity, 0, 0, 0, 0, 0])
state = jax.jit(pipeline.init)(ball, ball.init_q, qd)

_, ax = plt.subplots()
plt.xlim([-3, 3])
plt.ylim([0, 4])

for i in range(1000):
  if i % 10 == 0:
    visualize(ax, state.x.pos, i / 1000.)
  state = jax.jit(pipeline.step)(ball, state, None)

plt.title('ball in motion')
plt.show()
# %% [code cell 11]
pendulum = mjcf.loads("""
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body pos="0 0 -0.5">
      <joint axis="0 1 0" type="hinge"/>
      <geom pos="0 0 -1.5" size=".1" type="sphere"/>
      <body pos="0 0 -1.5">
        <joint axis="0 1 0" type="hinge"/>
        <geom pos="0 0 -1.5" size=".1" type="sphere"/>
        <body pos="0 0 -1.5">
          <joint axis="0 1 0" type="hinge"/>
          <geom pos="0 0 -1.5" size=".1" type="sphere"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
""")

state = pipeline.init(pendulum, pendulum.init_q, jp.zeros(pendulum.qd_size()))
# %% [code cell 13]
for q, qd in zip(state.q, state.qd):
  print(f'{q}\t{qd}')
# %% [code cell 15]
for pos, rot, vel, ang in zip(state.x.pos, state.x.rot, state.xd.vel, state.xd.ang):
  print(f'{pos}   \t{rot}\t{vel}\t{ang}')
# %% [code cell 17]
_, ax = plt.subplots()
plt.xlim([-3, 3])
plt.ylim([-4, 0])

visualize(ax, state.x.pos)
plt.title('pendulum at rest')
plt.show()
# %% [code cell 19]
#@title { run: "auto"}

from brax.generalized import pipeline as generalized_pipeline 
from brax.positional import pipeline as positional_pipeline 
from brax.spring import pipeline as spring_pipeline 

initial_angle = 70 #@param { type:"slider", min:0, max:90, step: 1 }
pipeline = 'generalized'  #@param ["generalized", "positional", "spring"]
step_size = "1 ms" #@param [".4 ms", "1 ms", "5 ms"]

substeps = {'.4 ms': 25, '1 ms': 10, '5 ms': 2}[step_size]
stiffness = {'.4 ms': 20000, '1 ms': 10000, '5 ms': 500}[step_size]
pipeline = {'generalized': generalized_pipeline,
            'positional': positional_pipeline,
            'spring': spring_pipeline}[pipeline]

# find reasonable stiffness and damping for the given dt
link = pendulum.link.replace(
    constraint_stiffness=jp.repeat(stiffness, 3),
    constraint_vel_damping=jp.zeros((3,)))
pendulum = pendulum.replace(link=link)
pendulum = pendulum.tree_replace({'opt.timestep': 0.01 / substeps})

init_q = jp.array([initial_angle * jp.pi / 180, 0, 0])
state = jax.jit(pipeline.init)(pendulum, init_q, jp.zeros(pendulum.qd_size()))

_, ax = plt.subplots()
plt.xlim([-3, 3])
plt.ylim([-4, 0])

for i in range(100 * substeps):
  if i % substeps == 0:
    visualize(ax, state.x.pos, i / (100 * substeps))
  state = jax.jit(pipeline.step)(pendulum, state, None)

plt.title('pendulum in motion')
plt.show()
# %% [code cell 21]
pointing_pendulum = mjcf.loads("""
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body pos="0 0 -0.5">
      <joint name="joint1" axis="0 1 0" type="hinge"/>
      <geom pos="0 0 -1.5" size=".1" type="sphere"/>
      <body pos="0 0 -1.5">
        <joint name="joint2" axis="0 1 0" type="hinge"/>
        <geom pos="0 0 -1.5" size=".1" type="sphere"/>
        <body pos="0 0 -1.5">
          <joint axis="0 1 0" type="hinge"/>
          <geom pos="0 0 -1.5" size=".1" type="sphere"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="joint1" kp="250"/>
    <position joint="joint2" kp="250"/>
  </actuator>
</mujoco>
""")
# %% [code cell 23]
#@title { run: "auto"}

target_angle_0 = -30 #@param { type:"slider", min:-90, max:90, step: 1 }
target_angle_1 = 50 #@param { type:"slider", min:-90, max:90, step: 1 }

q = pointing_pendulum.init_q
qd = jp.zeros(pointing_pendulum.qd_size())
state = jax.jit(generalized_pipeline.init)(pointing_pendulum, q, qd)

_, ax = plt.subplots()
plt.xlim([-3, 3])
plt.ylim([-4, 0])

for i in range(100):
  visualize(ax, state.x.pos, i / 100)
  act = jp.array([target_angle_0, target_angle_1]) * jp.pi / 180
  state = jax.jit(generalized_pipeline.step)(pointing_pendulum, state, act)

plt.title('pendulum reaching a target')
plt.show()
