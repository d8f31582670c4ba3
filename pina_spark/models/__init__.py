"""The learned things and the folders they live in: the text vectorizer Phi_pre (:mod:`.vectorizer`,
:mod:`.encoders`), fine-tuning the dense encoder on B_pre (:mod:`.finetune`, :mod:`.contrastive`),
B_pre as XMC problems (:mod:`.bpre`), the model folders of g and the vectorizer (:mod:`.artifacts`)
and train/test parity of the vectorizer (:mod:`.parity`).
"""
