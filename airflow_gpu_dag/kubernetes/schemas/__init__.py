"""Schemas shipped with the provider (data files; see each file's ``$comment`` for origin and license).

``volcano_podgroup_v1beta1.schema.json``: the ``openAPIV3Schema`` of the Volcano PodGroup CRD
(``scheduling.volcano.sh/v1beta1``) from https://github.com/volcano-sh/volcano (Apache License 2.0).
"""
