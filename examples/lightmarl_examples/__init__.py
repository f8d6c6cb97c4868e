"""Game-specific code for lightmarl's example recipes: rules, scripted experts and encoders of one game each.

lightmarl itself knows no game. What only makes sense for one env lives here, one package per
game, and recipes name it by class path:

* :mod:`lightmarl_examples.connect_four`: the drop rules of connect four
  (:mod:`~lightmarl_examples.connect_four.rules`), two scripted opponents
  (:class:`~lightmarl_examples.connect_four.ConnectFourHeuristicPolicy`, win-or-block, and
  :class:`~lightmarl_examples.connect_four.ConnectFourSearchPolicy`, alpha-beta search) and two board encoders
  (:class:`~lightmarl_examples.connect_four.ThreatFeaturesEncoder`,
  :class:`~lightmarl_examples.connect_four.DropAfterstateEncoder`).
* :mod:`lightmarl_examples.simple_spread`: scripted policies for mpe2 ``simple_spread``
  (:class:`~lightmarl_examples.simple_spread.SpreadToLandmarkPolicy`,
  :class:`~lightmarl_examples.simple_spread.SpreadByAssignmentPolicy`).

Installed next to lightmarl by ``scripts/install.sh`` (``pip install -e ./examples``).
"""
