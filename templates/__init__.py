"""Per-family Jinja chat templates (`<family>.jinja`), shipped inside the installed package.

Data only: `engine.templates.load_template_file` reads them with importlib.resources.
"""
